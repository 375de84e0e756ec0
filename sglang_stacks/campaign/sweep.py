"""One ``sweep run``'s trials: the ``Sweep`` each pool host's worker asks for its next trial
(``choose``: the study's suggestion judged by preflight, on a host no other trial holds), then runs
it as a trial stack on its host through the Automation API (deploy, benchmark, destroy) and tells
the study the outcome, until the strategy's candidates, the budget or the sampler's new suggestions
run out (``limits``). A trial whose host another stack held goes back to the queue (``hosts``).

Ctrl-C (``interrupt``) lets Pulumi finish the step in flight; each host's trial stack is destroyed
and the study told the trial was interrupted: its result is kept when its benchmark reached the
results history, else its candidate is queued to run again. The trials of a ``sweep run`` killed
outright are settled by the next one (``resume``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState
from pulumi import automation as auto

from sglang_stacks.campaign.attributes import (
    Driver,
    TrialRecord,
    TrialRecords,
    ran,
    read_study_attributes,
    write_attributes,
    write_study_attributes,
)
from sglang_stacks.campaign.choose import Chooser, Picked
from sglang_stacks.campaign.early_stop import IntervalPruner, merge_levels
from sglang_stacks.campaign.hosts import HOST_FAILURES, Rests
from sglang_stacks.campaign.interrupt import JUDGING_WAIT_S, CtrlC
from sglang_stacks.campaign.legacy import import_sweep_file
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.campaign.objective import samples
from sglang_stacks.campaign.plan import Plan, PlanRow
from sglang_stacks.campaign.resume import Resumption, settling
from sglang_stacks.campaign.samplers import report_repetitions
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.study import Heartbeats
from sglang_stacks.campaign.trial import TrialRunner
from sglang_stacks.errors import BenchmarkError, Cause, SpecError, StacksError
from sglang_stacks.results.stats import BenchmarkResult

__all__ = ["Sweep"]


@dataclass
class Sweep:
    """One ``sweep run`` of a campaign: its plan, project, report folder, search and trial runner."""

    plan: Plan
    project: Path
    folder: Path
    db_path: Path
    search: Search
    trials: TrialRunner
    driver: Driver | None = None
    """This ``sweep run`` (default: this process, in ``project``)."""
    stop: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)
    events: list[str] = field(default_factory=list)
    ctrl_c: CtrlC = field(init=False)
    """Ctrl-C sets ``stop``, while ``run_sweep`` has it installed; it says at once that it came."""
    resumption: Resumption = field(init=False)
    chooser: Chooser = field(init=False)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _rests: Rests = field(default_factory=Rests)
    _beats: Heartbeats = field(init=False)
    _records: TrialRecords = field(init=False)
    _elapsed_before: float = 0.0
    """The campaign's time sweeping in its earlier runs, read from the study once, in ``prepare``."""

    def __post_init__(self) -> None:
        if self.driver is None:
            self.driver = Driver.this(self.project)
        self.ctrl_c = CtrlC(self.stop)
        self.resumption = Resumption(
            self.plan, self.search, self.trials, self.db_path, self.say, self.driver, self.folder
        )
        self.resumption.watch()
        self._records = TrialRecords(self.search.study)
        self._beats = Heartbeats(self.search.study)
        parts = (self.plan, self.search, self.driver, self.resumption, self.records, self.elapsed_s)
        self.chooser = Chooser(*parts, self.say, self._beats, self._rests)

    @property
    def ended(self) -> str | None:
        """Why the search stopped before its candidates ran out (budget, convergence)."""
        return self.chooser.ended

    def close(self) -> None:
        """Stop the heartbeats (every trial is told)."""
        self._beats.close()

    @property
    def study(self) -> optuna.Study:
        return self.search.study

    def say(self, line: str) -> None:
        self.events.append(line)

    def records(self) -> list[TrialRecord]:
        """Every trial's record; those of finished trials, and queued ones while they wait, are
        read once and kept."""
        return self._records.read()

    def elapsed_s(self) -> float:
        """The campaign's time sweeping, this run's and the earlier runs'."""
        return self._elapsed_before + time.monotonic() - self.started

    def keep_elapsed(self) -> None:
        """Keep the campaign's time sweeping in its study, for the next run's budget."""
        write_study_attributes(self.study, elapsed_s=self.elapsed_s())

    # -- before the workers start -------------------------------------------------------------

    def prepare(self) -> None:
        """Import the previous release's sweep file, settle the trials of a killed run, and
        queue a grid's candidates."""
        self.chooser.rows = {row.candidate.digest: row for row in self.plan.rows}
        with settling(self.folder):
            for line in import_sweep_file(self.search, self.folder, self.trials.settle):
                self.say(line)
            self.resumption.settle_dead()
        self._elapsed_before = read_study_attributes(self.study).elapsed_s  # the old release's time too
        if self.search.strategy == "grid":
            taken = {r.stack for r in self.records() if r.state != "FAIL"}
            for row in self.plan.kept():
                if row.stack not in taken:
                    self.search.enqueue(row.candidate.labels, {"stack": row.stack})

    # -- choosing the next trial ----------------------------------------------------------------

    def next_trial(self, host: PoolHost) -> Picked | None:
        """The next trial for ``host``, its attributes written; None when the search is over
        (``Chooser.next``)."""
        return self.chooser.next(host, self.stop, self._lock)

    # -- running a trial --------------------------------------------------------------------------

    def work(self, host: PoolHost) -> None:
        """One host's loop: run the next trial, until the search is over or the sweep stops."""
        while not self.stop.is_set() and not self._rests.out(host.name):
            picked = self.next_trial(host)
            if picked is None:
                return
            self.run_trial(picked, host)

    def _tell_measured(
        self, picked: Picked, levels: Sequence[BenchmarkResult], stopped: str | None, told: dict[str, Any]
    ) -> None:
        stack, host = picked.attributes.stack, picked.attributes.host
        try:
            evaluation = self.search.tell_measured(picked.trial, levels, told, stopped_early=stopped)
        except BenchmarkError as error:
            self.search.tell_failed(picked.trial, "benchmark", str(error), told)
            self.say(f"{stack} failed on {host} (benchmark): {error}")
            return
        missed = "".join(f"; misses {v.describe()}" for v in evaluation.violations)
        self.say(f"{stack} measured on {host}: {evaluation.values[0]:.1f}{missed}")
        if stopped:
            self.say(f"{stack} stopped early: {stopped}")

    def run_trial(self, picked: Picked, host: PoolHost) -> None:
        """Deploy, benchmark and destroy one trial on ``host``, then tell the study."""
        try:
            self._run_trial(picked, host)
        finally:
            self._beats.release(picked.trial._trial_id)

    def _run_trial(self, picked: Picked, host: PoolHost) -> None:
        row, trial, stack = picked.row, picked.trial, picked.row.stack
        self.say(f"{stack} started on {host.name}")
        outcome: dict[str, Any]
        try:
            levels, stopped = self.measure(row, host, trial)
            outcome = {"status": "measured", "levels": levels, "stopped_early": stopped}
        except Exception as error:  # one trial's failure, whatever it is, must not end the sweep
            # Ctrl-C reaches every Pulumi process of the sweep, whichever step it was in, and
            # this process at the same moment: noted at once, however late its handler runs.
            if self.ctrl_c.arrived(within_s=JUDGING_WAIT_S):
                self._interrupted(picked)
                return
            failure = self.trials.failure(stack, error)
            if failure.cause in (Cause.CLAIM, Cause.HOST):  # the host's failure, not the candidate's
                self._back_to_queue(picked, host, failure.cause, failure.message)
                return
            outcome = {"status": "failed", "cause": failure.cause, "message": failure.message}
        self._rests.served(host.name)
        outcome["finished_at"] = time.time()
        with self._unless_taken_over(stack):
            write_attributes(self.study, trial._trial_id, **outcome)  # kept should the sweep die now
        if not self._destroyed(stack):
            self.say(f"{stack}: destroy failed; the next sweep run destroys it (see its log)")
            return  # running, under this driver: the next sweep run settles it
        told = ran(picked.attributes, finished_at=outcome["finished_at"])
        with self._lock, self._unless_taken_over(stack):
            if outcome["status"] == "measured":
                self._tell_measured(picked, outcome["levels"], outcome["stopped_early"], told)
            else:
                self.search.tell_failed(trial, outcome["cause"], outcome["message"], told)
                said = f"{stack} failed on {host.name} ({outcome['cause']}); the sweep goes on."
                self.say(f"{said} {outcome['message']}")

    def _back_to_queue(self, picked: Picked, host: PoolHost, cause: Cause, why: str) -> None:
        """The trial could not run for its host, not its candidate (another stack held the host's
        claim; the host was unreachable or not what the pool says): it goes back to the queue and the
        host rests; a host that failed ``HOST_FAILURES`` trials in a row itself takes no more."""
        stack = picked.row.stack
        if not self._destroyed(stack):
            self.say(f"{stack}: destroy failed; the next sweep run destroys it (see its log)")
            return
        with self._lock, self._unless_taken_over(stack):
            self.search.requeue(picked.trial, picked.attributes, cause, why)
            rest = self._rests.refused(host.name, by_itself=cause == Cause.HOST)
            said = "is held by another stack" if cause == Cause.CLAIM else "failed it, not its candidate"
            then = (
                f"{host.name} takes no more trials in this run: it failed {HOST_FAILURES} in a row itself "
                "(fix it, then run the sweep again)"
                if self._rests.out(host.name)
                else f"{host.name} is tried again in {rest:g} s"
            )
            self.say(f"{stack}: {host.name} {said} ({why}); the trial goes back to the queue, and {then}")

    @contextlib.contextmanager
    def _unless_taken_over(self, stack: str) -> Iterator[None]:
        """Tell the study of a trial, unless another driver has taken it over (this driver was not
        heard from for ``GRACE_S``): its candidate is queued there, and this outcome is dropped."""
        try:
            yield
        except UpdateFinishedTrialError:
            self.say(
                f"{stack}: another driver took this trial over while this driver was not heard from; "
                "its outcome here is dropped (the candidate runs again)"
            )

    def measure(
        self, row: PlanRow, host: PoolHost, trial: optuna.Trial
    ) -> tuple[list[BenchmarkResult], str | None]:
        """Deploy and benchmark a trial: its levels, and why it stopped early (None: it did not).
        With early stop, its first repetitions are reported to the study and its pruner decides."""
        early = self.plan.campaign.early_stop
        total = row.spec.benchmark.repetitions if row.spec else 0
        if early is None or early.after_repetitions >= total:
            return self.trials.deploy(row, host), None
        goal = self.plan.campaign.goals[0]
        gpus = row.spec.tp_size if row.spec else 1
        first = self.trials.deploy(row, host, {"benchmark.repetitions": early.after_repetitions})
        report_repetitions(trial, samples(goal, first, gpus))
        pruner = self.study.pruner
        if isinstance(pruner, IntervalPruner) and trial.should_prune():
            frozen = self.study.get_trials(deepcopy=False)[trial.number]
            return first, pruner.reason(self.study, frozen)
        rest = self.trials.deploy(
            row, host, {"benchmark.repetitions": total - early.after_repetitions}, benchmark_again=True
        )
        report_repetitions(trial, samples(goal, rest, gpus), first_step=early.after_repetitions)
        return merge_levels(first, rest), None

    def _destroyed(self, stack: str, interrupted: bool = False) -> bool:
        """Destroy a trial's stack; settle it first (``TrialRunner.settle``) when Ctrl-C cut its
        update short, which may have left a server it was launching running, known to no state."""
        for _ in range(2):
            try:
                if interrupted:
                    self.trials.settle(stack)
                else:
                    self.trials.destroy(stack)
                return True
            except SpecError:
                return True  # the backend has no such stack: nothing was deployed
            except (auto.CommandError, StacksError):
                if not self.ctrl_c.arrived(within_s=JUDGING_WAIT_S):
                    return False
                interrupted = True
        return False

    def _interrupted(self, picked: Picked) -> None:
        """Ctrl-C cut the trial short: destroy its stack, keep a result that reached the history,
        else queue its candidate again."""
        stack = picked.attributes.stack
        levels = self.resumption.recorded_levels(picked.attributes)
        if not self._destroyed(stack, interrupted=True):
            return  # running, under this driver: the next sweep run settles it
        with self._lock, self._unless_taken_over(stack):
            if levels:
                self._tell_measured(picked, levels, None, ran(picked.attributes, finished_at=time.time()))
                return
            write_attributes(self.study, picked.trial._trial_id, status="interrupted")
            self.study.tell(picked.trial, state=TrialState.FAIL)
            self.search.enqueue(picked.attributes.labels, {"stack": stack, "replaces": picked.trial.number})
