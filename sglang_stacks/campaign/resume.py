"""Taking over the trials of a driver that is gone. A ``sweep run`` killed outright (SIGKILL of its
process group, a crash, a reboot) leaves its trials running in the study.

- The next ``sweep run`` in the same project on the same machine settles each at its start
  (``TrialRunner.settle``: the dead update's Pulumi lock, a server its create had launched, pending
  operations, then destroy), keeps a result it had saved or that the results history recorded, and
  queues its candidate again otherwise, as the trial that ``replaces`` it.
- Any other driver of the campaign, on any machine, takes a trial over once its heartbeat is stale
  (``GRACE_S`` without one: Optuna's ``fail_stale_trials`` fails it, in one driver only, and calls
  ``take_over``): it keeps the outcome the trial had saved, or queues its candidate again, and
  settles its stack too when that stack is in its own backend. A stack of this project that another
  machine's driver took over is settled by the next ``sweep run`` here.

A trial that Ctrl-C cut short keeps a recorded result the same way (``recorded_levels``).
"""

from __future__ import annotations

import contextlib
import fcntl
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState
from pulumi import automation as auto

from sglang_stacks.campaign.attributes import (
    TrialAttributes,
    TrialRecord,
    ran,
    records,
    suggested,
    write_attributes,
)
from sglang_stacks.campaign.driver import Driver
from sglang_stacks.campaign.plan import Plan
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.study import GRACE_S, database_of
from sglang_stacks.campaign.trial import TrialRunner
from sglang_stacks.causes import cause_text
from sglang_stacks.errors import BenchmarkError, PulumiError, StacksError
from sglang_stacks.results import history
from sglang_stacks.results.stats import BenchmarkResult

__all__ = ["ORPHAN_S", "Resumption", "settling"]

ORPHAN_S = 120.0
"""A trial asked for but never given a driver (its driver died in between) is failed after this."""
_SETTLE_LOCK = ".settle.lock"


@contextlib.contextmanager
def settling(folder: Path) -> Iterator[None]:
    """One driver of this machine at a time settles dead trials (in the campaign's report folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / _SETTLE_LOCK).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Resumption:
    """What a ``sweep run`` does with the trials an earlier run of this machine left unfinished."""

    plan: Plan
    search: Search
    trials: TrialRunner
    db_path: Path
    """The results history, where a trial's benchmark records its result."""
    say: Callable[[str], None]
    driver: Driver
    """This driver: its own trials are never taken over by itself."""
    folder: Path
    """The campaign's report folder, which holds the settling lock."""

    @property
    def study(self) -> optuna.Study:
        return self.search.study

    def settle_dead(self) -> None:
        """Settle every running trial whose driver ran in this project on this machine and is gone,
        and the stacks of this project's trials that another driver took over."""
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if (attributes := suggested(self.study, trial)) is None or attributes.driver is None:
                self._orphan(trial)
        for record in records(self.study, (TrialState.RUNNING,)):
            if self._dead_here(record):
                self._settle(record)
        for record in records(self.study, (TrialState.FAIL,)):
            # Taken over while it ran (its last status is not what a driver tells a trial it ends).
            if record.status in ("running", "measured", "failed") and record.host and self._dead_here(record):
                self._clear(record)

    def _dead_here(self, record: TrialAttributes) -> bool:
        driver = record.driver
        return driver is not None and driver.shares_backend(self.driver) and driver.alive_here() is False

    def watch(self) -> None:
        """Have the study's storage hand each trial it finds stale to ``take_over``."""
        database = database_of(self.study)
        if database is not None:
            database.heartbeat_stale_trial_callback = self.take_over

    def take_over_stale(self) -> None:
        """Fail every running trial whose heartbeat is stale and take it over (only one driver
        fails each: Optuna changes its state in one transaction)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study)

    def take_over(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """A stale trial, failed: keep its saved outcome or queue its candidate again, and settle
        its stack when it is in this backend. Never raises: Optuna would skip the other stale
        trials' callbacks, and their candidates would be lost."""
        try:
            self._take_over(trial)
        except Exception as error:  # said, and the sweep goes on
            self.say(f"trial {trial.number}: taking it over failed ({error}); run the sweep again to retry")

    def _take_over(self, trial: FrozenTrial) -> None:
        attributes = suggested(self.study, trial)
        if attributes is None:
            return  # asked, and its driver died before writing a thing: nothing to run again
        driver = attributes.driver
        whose = (
            "this driver"
            if driver == self.driver
            else (f"its driver (pid {driver.pid} on {driver.machine})" if driver else "its driver")
        )
        self.say(f"{attributes.stack}: {whose} was not heard from for {GRACE_S} s; taking its trial over")
        if attributes.host and self._dead_here(attributes):
            with settling(self.folder):
                for line in self.trials.settle(attributes.stack):
                    self.say(f"{attributes.stack}: {line}")
        self._keep_or_queue(attributes, trial.number)

    def _clear(self, record: TrialRecord) -> None:
        """Settle the stack of a trial of this project that another driver took over, if it holds
        anything still."""
        if not self.trials.holds(record.stack):
            return
        self.say(f"{record.stack}: another driver took its trial over; settling the stack it left here")
        for line in self._settled(record):
            self.say(f"{record.stack}: {line}")

    def _settled(self, record: TrialRecord) -> list[str]:
        log = f"reports/{self.plan.name}/logs/{record.stack}.log"
        try:
            return self.trials.settle(record.stack)
        except StacksError:
            # Its own class and fix (a host out of reach, a live update's lock) say what to do.
            self.say(f"{record.stack}: its stack could not be settled (see {log}); the sweep stops")
            raise
        except auto.CommandError as error:
            raise PulumiError(
                f"Trial {record.stack} of a killed sweep could not be settled: Pulumi failed ({error}). See "
                f"{log}, fix what it names, and run the sweep again."
            ) from None

    def _orphan(self, trial: optuna.trial.FrozenTrial) -> None:
        """A trial asked for whose driver died before it wrote its driver: nothing was launched.
        It is failed, and a queued candidate queued again, once no live driver can be writing."""
        started = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
        if time.time() - started < ORPHAN_S:
            return
        with contextlib.suppress(UpdateFinishedTrialError, ValueError):  # another driver did it
            self.study.tell(trial.number, state=TrialState.FAIL)
            if attributes := suggested(self.study, trial):
                self.search.enqueue(attributes.labels, {"stack": attributes.stack})

    def _settle(self, record: TrialRecord) -> None:
        driver = record.driver
        assert driver is not None
        self.say(f"{record.stack}: its sweep run (pid {driver.pid}) is gone; settling its stack")
        for line in self._settled(record):
            self.say(f"{record.stack}: {line}")
        try:
            write_attributes(self.study, record.trial_id, status="interrupted")
            self.study.tell(record.number, state=TrialState.FAIL)
        except (UpdateFinishedTrialError, ValueError):
            return  # another driver took it over meanwhile, and kept or queued its candidate
        self._keep_or_queue(record, record.number)

    def _keep_or_queue(self, attributes: TrialAttributes, number: int) -> None:
        """After a trial's driver is gone: tell its saved outcome as the trial that replaces it, or
        queue its candidate again."""
        saved = self._saved_outcome(attributes)
        if saved is not None:
            try:
                self.search.record(saved.model_copy(update={"replaces": number}))
                kept = (
                    "result it had measured"
                    if saved.status == "measured"
                    else f"failure ({cause_text(saved.cause)})"
                )
                self.say(f"{attributes.stack}: keeps the {kept}; not run again")
                return
            except (KeyError, BenchmarkError) as error:
                self.say(f"{attributes.stack}: its saved outcome cannot be read ({error}); it runs again")
        self.search.enqueue(attributes.labels, {"stack": attributes.stack, "replaces": number})
        self.say(f"{attributes.stack}: queued to run again")

    def _saved_outcome(self, record: TrialAttributes) -> TrialAttributes | None:
        """The outcome a killed trial had saved (measured, or failed), or the result the history
        recorded since it started; None when it has none (it runs again)."""
        if record.status in ("measured", "failed"):
            outcome = record.model_dump(include={"status", "levels", "cause", "message", "stopped_early"})
        else:
            levels = self.recorded_levels(record)
            if not levels:
                return None
            outcome = {"status": "measured", "levels": levels, "finished_at": time.time()}
        return TrialAttributes.model_validate(ran(record, **outcome))

    def recorded_levels(self, attributes: TrialAttributes) -> list[BenchmarkResult]:
        """The levels a trial's benchmark wrote to the history after the trial started, if any.
        None with early stop: the rows may hold the first part of a trial only (it runs again)."""
        if self.plan.campaign.early_stop is not None or attributes.started_at is None:
            return []
        since = attributes.started_at
        found = [
            r for r in history.rows(self.db_path, [attributes.stack]) if r.recorded_at.timestamp() >= since
        ]
        return [row.result for row in found]
