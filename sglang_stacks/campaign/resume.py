"""Resuming a campaign whose ``sweep run`` was killed outright (SIGKILL of its process group): its
trials stay running in the study under a driver that is gone. The next ``sweep run`` on this
machine settles each (``TrialRunner.settle``: the dead update's Pulumi lock, a server its create had
launched, pending operations, then destroy), keeps a result it had saved or that the results history
recorded, and queues its candidate again otherwise, as the trial that ``replaces`` it. Trials of a
driver on another machine are that machine's to settle (its stacks live in its backend). A trial
that Ctrl-C cut short keeps a recorded result the same way (``recorded_levels``).
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from pulumi import automation as auto

from sglang_stacks.campaign.attributes import (
    TrialAttributes,
    TrialRecord,
    ran,
    records,
    suggested,
    write_attributes,
)
from sglang_stacks.campaign.plan import Plan
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.trial import TrialRunner
from sglang_stacks.errors import BenchmarkError, StacksError
from sglang_stacks.results import history

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

    @property
    def study(self) -> optuna.Study:
        return self.search.study

    def settle_dead(self) -> None:
        """Settle every running trial whose driver ran on this machine and is gone."""
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if (attributes := suggested(self.study, trial)) is None or attributes.driver is None:
                self._orphan(trial)
        for record in records(self.study, (TrialState.RUNNING,)):
            if record.driver is not None and record.driver.alive_here() is False:
                self._settle(record)

    def _orphan(self, trial: optuna.trial.FrozenTrial) -> None:
        """A trial asked for whose driver died before it wrote its driver: nothing was launched.
        It is failed, and a queued candidate queued again, once no live driver can be writing."""
        started = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
        if time.time() - started < ORPHAN_S:
            return
        self.study.tell(trial.number, state=TrialState.FAIL)
        if attributes := suggested(self.study, trial):
            self.search.enqueue(attributes.labels, {"stack": attributes.stack})

    def _settle(self, record: TrialRecord) -> None:
        driver = record.driver
        assert driver is not None
        self.say(f"{record.stack}: its sweep run (pid {driver.pid}) is gone; settling its stack")
        try:
            found = self.trials.settle(record.stack)
        except (StacksError, auto.CommandError) as error:
            raise StacksError(
                f"Trial {record.stack} of a killed sweep could not be settled ({error}). See "
                f"reports/{self.plan.name}/logs/{record.stack}.log, fix the cause, and run the sweep again."
            ) from None
        for line in found:
            self.say(f"{record.stack}: {line}")
        saved = self._saved_outcome(record)
        write_attributes(self.study, record.trial_id, status="interrupted")
        self.study.tell(record.number, state=TrialState.FAIL)
        if saved is not None:
            try:
                self.search.record(saved.model_copy(update={"replaces": record.number}))
                kept = "result it had measured" if saved.status == "measured" else f"failure ({saved.cause})"
                self.say(f"{record.stack}: keeps the {kept}; not run again")
                return
            except (KeyError, BenchmarkError) as error:
                self.say(f"{record.stack}: its saved outcome cannot be read ({error}); it runs again")
        self.search.enqueue(record.labels, {"stack": record.stack, "replaces": record.number})
        self.say(f"{record.stack}: queued to run again")

    def _saved_outcome(self, record: TrialRecord) -> TrialAttributes | None:
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

    def recorded_levels(self, attributes: TrialAttributes) -> list[dict[str, Any]]:
        """The levels a trial's benchmark wrote to the history after the trial started, if any.
        None with early stop: the rows may hold the first part of a trial only (it runs again)."""
        if self.plan.campaign.early_stop is not None or attributes.started_at is None:
            return []
        since = attributes.started_at
        found = [
            r for r in history.rows(self.db_path, [attributes.stack]) if r.recorded_at.timestamp() >= since
        ]
        return [row.result.model_dump(mode="json") for row in found]
