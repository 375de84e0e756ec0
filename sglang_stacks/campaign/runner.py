"""``sweep run``, the command: checks what it can before anything is launched (the pool's SSH keys,
a budget for a space too large to run whole), opens the campaign's search, has the ``Sweep`` settle
what a killed run left, then runs one worker thread per pool host until the search is over, with
the progress on the terminal; Ctrl-C stops it, the steps in flight finished and their stacks
destroyed, and the same command resumes it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TextIO

from sglang_stacks.campaign import progress
from sglang_stacks.campaign.attributes import write_study_attributes
from sglang_stacks.campaign.keys import check_pool_keys
from sglang_stacks.campaign.limits import check_bounded, check_pool_answers, check_runnable
from sglang_stacks.campaign.model_pool import describe_pool
from sglang_stacks.campaign.plan import Plan
from sglang_stacks.campaign.pool_facts import check_pool_facts
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.sweep import Sweep
from sglang_stacks.campaign.trial import TrialRunner
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import stacks_dir

__all__ = ["opening", "run_sweep"]


def opening(plan: Plan) -> str:
    """What ``sweep run`` is about to do, as its first line."""
    pool = plan.campaign.pool
    hosts = describe_pool(pool)
    each = "fleet" if pool[0].fleet is not None else "host"
    if plan.listed:
        counts = {v: sum(r.verdict == v for r in plan.rows) for v in ("kept", "discarded", "over_budget")}
        left = [
            f"{counts['discarded']} discarded by preflight, never launched" if counts["discarded"] else "",
            f"{counts['over_budget']} over budget" if counts["over_budget"] else "",
        ]
        why = "; ".join(part for part in left if part)
        what = (
            f"{counts['kept']} of {len(plan.rows)} candidates kept ({why})"
            if why
            else f"{len(plan.rows)} candidates, each kept by preflight"
        )
    else:
        what = f"{plan.size or 'no end of'} candidates, preflight judging each suggestion before its launch"
    verb = "running them" if plan.strategy == "grid" else f"searching them with {plan.strategy}"
    budget = plan.campaign.budget
    limits = [
        f"{name} {value:g}"
        for name, value in (
            ("max_trials", budget.max_trials),
            ("max_gpu_hours", budget.max_gpu_hours),
            ("max_hours", budget.max_hours),
        )
        if value is not None
    ]
    until = f" until budget {', '.join(limits)}" if limits else ""
    return (
        f"sweep {plan.name}: {what}; {verb} on {hosts}, one trial per {each} at a time{until}. "
        "Ctrl-C stops it; the same command resumes."
    )


def run_sweep(
    plan: Plan, *, project: Path, reports: Path, db_path: Path, out: TextIO, keep_trial_stacks: bool = False
) -> int:
    """Run the plan's search; 0 when it is over (every trial run, or a budget reached), 130 when
    interrupted. A trial's stack leaves the backend and ``stacks/`` once destroyed, unless
    ``keep_trial_stacks``."""
    folder = reports / plan.name
    check_pool_keys(plan.campaign, stacks_dir(project))  # before anything is launched
    check_bounded(plan)
    check_runnable(plan)
    check_pool_answers(plan)
    check_pool_facts(plan, project)
    print(opening(plan), file=out, flush=True)
    search = Search.open(plan, folder)
    write_study_attributes(search.study, strategy=plan.strategy)  # what this run said it searches with
    trials = TrialRunner(
        project, folder / "logs", plan.name, plan.campaign.base, keep_stacks=keep_trial_stacks
    )
    sweep = Sweep(plan, project, folder, db_path, search, trials)
    sweep.prepare()
    workers = [
        threading.Thread(target=sweep.work, args=(h,), name=h.name, daemon=True) for h in plan.campaign.pool
    ]
    interrupted = False
    with sweep.ctrl_c:  # until the workers are done
        try:
            with progress.display(sweep, out) as refresh:
                for worker in workers:
                    worker.start()
                while any(w.is_alive() for w in workers):
                    refresh()
                    time.sleep(0.5)
                refresh()
        except KeyboardInterrupt:
            interrupted = True
            sweep.stop.set()
            print(
                "sweep: interrupted; finishing the steps in flight and destroying their stacks",
                file=out,
                flush=True,
            )
            for worker in workers:
                worker.join()
        finally:
            sweep.keep_elapsed()
            sweep.close()
    print(progress.summary(sweep), file=out, flush=True)
    return ExitCode.INTERRUPTED if interrupted else ExitCode.OK
