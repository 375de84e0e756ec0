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
from sglang_stacks.campaign.keys import check_pool_keys
from sglang_stacks.campaign.limits import check_bounded, check_runnable
from sglang_stacks.campaign.plan import Plan
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.sweep import Sweep
from sglang_stacks.campaign.trial import TrialRunner
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import stacks_dir

__all__ = ["run_sweep"]


def run_sweep(plan: Plan, *, project: Path, reports: Path, db_path: Path, out: TextIO) -> int:
    """Run the plan's search; 0 when it is over (every trial run, or a budget reached), 130 when
    interrupted."""
    folder = reports / plan.name
    check_pool_keys(plan.campaign, stacks_dir(project))  # before anything is launched
    check_bounded(plan)
    check_runnable(plan)
    search = Search.open(plan, folder)
    trials = TrialRunner(project, folder / "logs", plan.name, plan.campaign.base)
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
    print(progress.summary(sweep), file=out, flush=True)
    return ExitCode.INTERRUPTED if interrupted else ExitCode.OK
