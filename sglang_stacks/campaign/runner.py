"""``sweep run``: the plan's kept candidates as trials on the pool, one trial per host at a time,
in parallel across hosts, with a live table of progress and a resumable sweep file.

A sweep resumed after a kill first settles the trials the kill interrupted: a trial whose
benchmark reached the results history keeps that result (it is not run again); any other is
destroyed (its server stopped, its claim released) and runs again from the start. Ctrl-C stops
the sweep the same way: Pulumi finishes the step in flight, each host's trial is destroyed, and
the next ``sweep run`` continues.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pulumi import automation as auto

from sglang_stacks.campaign import progress
from sglang_stacks.campaign.early_stop import clearly_worse, merge_levels
from sglang_stacks.campaign.keys import check_pool_keys
from sglang_stacks.campaign.model import PoolHost
from sglang_stacks.campaign.objective import samples
from sglang_stacks.campaign.plan import Plan, PlanRow
from sglang_stacks.campaign.state import SweepState, TrialRecord
from sglang_stacks.campaign.trial import TrialRunner
from sglang_stacks.errors import StacksError
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import stacks_dir
from sglang_stacks.results import history

__all__ = ["Sweep", "run_sweep"]


@dataclass
class Sweep:
    """One run of a campaign's sweep: its plan, project, report folder, state and history."""

    plan: Plan
    project: Path
    folder: Path
    db_path: Path
    state: SweepState
    trials: TrialRunner
    stop: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)
    events: list[str] = field(default_factory=list)

    def rows(self) -> dict[str, PlanRow]:
        return {row.stack: row for row in self.plan.rows}

    def say(self, line: str) -> None:
        self.events.append(line)

    def sync(self) -> None:
        """Add the plan's kept candidates the sweep file lacks, as pending trials, in plan order."""
        with self.state.edit() as document:
            for row in self.plan.kept():
                if row.stack not in document.trials:
                    document.trials[row.stack] = TrialRecord(stack=row.stack, labels=row.candidate.labels)

    def over_budget(self) -> bool:
        hours = self.plan.campaign.budget.max_hours
        spent = self.state.elapsed_s + time.monotonic() - self.started
        return hours is not None and spent >= hours * 3600

    def recover(self) -> None:
        """Settle trials a killed sweep left running or measured (see the module docstring)."""
        for record in self.state.trials():
            if record.status not in ("running", "measured"):
                continue
            levels = record.levels or self._recorded_levels(record)
            self.say(f"{record.stack}: interrupted on {record.host}; destroying its stack")
            if not self._destroyed(record.stack, clear_pending=True):
                raise StacksError(
                    f"Trial {record.stack} could not be destroyed (see reports/{self.plan.name}/logs/"
                    f"{record.stack}.log). Fix the cause, run `pulumi destroy -s {record.stack}`, "
                    "and run the sweep again."
                )
            if levels:
                self.state.update(record.stack, status="done", levels=levels, finished_at=time.time())
                self.say(f"{record.stack}: kept its recorded result (not run again)")
            else:
                self.state.update(record.stack, status="pending", host=None, started_at=None)

    def _recorded_levels(self, record: TrialRecord) -> list[dict[str, Any]]:
        """The result a trial's benchmark wrote to the history after the trial started, if any.
        Nothing with early stop: the row may hold the first part of a trial only (it runs again)."""
        if self.plan.campaign.early_stop is not None:
            return []
        since = record.started_at or 0.0
        found = [r for r in history.rows(self.db_path, [record.stack]) if r.recorded_at.timestamp() >= since]
        return [found[-1].result.model_dump(mode="json")] if found else []

    def work(self, host: PoolHost) -> None:
        """One host's loop: take the next pending trial, run it, until none is left or the sweep stops."""
        while not self.stop.is_set() and not self.over_budget():
            record = self.state.claim_next(host.name, time.time())
            if record is None:
                return
            self.run_trial(self.rows()[record.stack], host)

    def run_trial(self, row: PlanRow, host: PoolHost) -> None:
        stack = row.stack
        self.say(f"{stack} started on {host.name}")
        try:
            levels, stopped = self.measure(row, host)
            value = samples(self.plan.campaign.objective, levels)
            self.state.update(stack, status="measured", levels=levels, stopped_early=stopped)
            self.say(f"{stack} measured on {host.name}: {sum(value) / len(value):.1f}")
            if stopped:
                self.say(f"{stack} stopped early: {stopped}")
        except Exception as error:  # one trial's failure, whatever it is, must not end the sweep
            if self.stop.is_set():
                # Ctrl-C reaches every Pulumi process of the sweep, whichever step it was in.
                self._interrupted(stack)
                return
            failure = self.trials.failure(stack, error)
            self.state.update(stack, status="failed", cause=failure.cause, message=failure.message)
            self.say(f"{stack} failed on {host.name} ({failure.cause}); the sweep goes on")
        if not self._destroyed(stack):
            self.say(f"{stack}: destroy failed; the next sweep run destroys it (see its log)")
            return  # still measured (or failed with its stack): recover() destroys it next time
        with self.state.edit() as document:
            record = document.trials[stack]
            final = "done" if record.status == "measured" else record.status
            document.trials[stack] = record.model_copy(update={"status": final, "finished_at": time.time()})

    def measure(self, row: PlanRow, host: PoolHost) -> tuple[list[dict[str, Any]], str | None]:
        """Deploy and benchmark a trial: its levels, and why it stopped early (None: it did not)."""
        early = self.plan.campaign.early_stop
        total = row.spec.benchmark.repetitions if row.spec else 0
        if early is None or early.after_repetitions >= total:
            return self.trials.deploy(row, host), None
        first = self.trials.deploy(row, host, {"benchmark.repetitions": early.after_repetitions})
        objective = self.plan.campaign.objective
        stopped = clearly_worse(objective, first, self.state.trials(), total)
        if stopped:
            return first, stopped
        rest = self.trials.deploy(
            row, host, {"benchmark.repetitions": total - early.after_repetitions}, benchmark_again=True
        )
        return merge_levels(first, rest), None

    def _destroyed(self, stack: str, clear_pending: bool = False) -> bool:
        """Destroy a trial's stack; once more when Ctrl-C cut the first attempt short."""
        for _ in range(2):
            try:
                self.trials.destroy(stack, clear_pending=clear_pending)
                return True
            except StacksError:
                return True  # the backend has no such stack: nothing was deployed
            except auto.CommandError:
                if not self.stop.is_set():
                    return False
                clear_pending = True
        return False

    def _interrupted(self, stack: str) -> None:
        """Ctrl-C cut the update short: keep a result that reached the history, destroy, leave it
        for the next run."""
        record = next(t for t in self.state.trials() if t.stack == stack)
        levels = self._recorded_levels(record)
        if not self._destroyed(stack, clear_pending=True):
            return  # recover() tries again
        if levels:
            self.state.update(stack, status="done", levels=levels, finished_at=time.time())
        else:
            self.state.update(stack, status="pending", host=None, started_at=None)


def run_sweep(plan: Plan, *, project: Path, reports: Path, db_path: Path, out: TextIO) -> int:
    """Run the plan's sweep; 0 when every trial has run (passed or failed), 130 when interrupted."""
    folder = reports / plan.name
    state = SweepState.open(folder, plan.name)
    check_pool_keys(plan.campaign, stacks_dir(project))  # before anything is launched
    trials = TrialRunner(project, folder / "logs", plan.name, plan.campaign.base)
    sweep = Sweep(plan, project, folder, db_path, state, trials)
    sweep.sync()
    sweep.recover()
    workers = [
        threading.Thread(target=sweep.work, args=(h,), name=h.name, daemon=True) for h in plan.campaign.pool
    ]
    interrupted = False
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
        with state.edit() as document:
            document.elapsed_s += time.monotonic() - sweep.started
    print(progress.summary(sweep), file=out, flush=True)
    return ExitCode.INTERRUPTED if interrupted else ExitCode.OK
