"""Which trial a pool host's worker runs next: the study's suggestion (an enqueued candidate first),
judged by preflight and the memory planner (a doomed one is told infeasible, nothing launched; one
already run gets its result again), on a host no other trial holds (``hosts``). A host's worker
waits while another driver's trial holds its host, while the host rests after a refused claim, and
while no candidate is left to start but other drivers' trials run: a trial whose driver dies is
taken over once its heartbeat is stale (``resume``) and may come back to the queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from sglang_stacks.campaign.attributes import TrialAttributes, TrialRecord, write_attributes
from sglang_stacks.campaign.axes import trial_stack_name
from sglang_stacks.campaign.driver import Driver
from sglang_stacks.campaign.hosts import POLL_S, Rests, give_way_s, holder, place
from sglang_stacks.campaign.limits import MAX_REPEATS, earlier_trial, exhausted, over_budget
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.campaign.plan import Plan, PlanRow, judge
from sglang_stacks.campaign.resume import Resumption
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.study import Heartbeats

__all__ = ["Chooser", "Picked"]


@dataclass(frozen=True)
class Picked:
    """A trial to run on a host, its plan row and its attributes so far."""

    trial: optuna.Trial
    row: PlanRow
    attributes: TrialAttributes


@dataclass
class Chooser:
    """Picks each host's next trial for one ``sweep run`` (``Sweep``), whose parts it shares."""

    plan: Plan
    search: Search
    driver: Driver
    resumption: Resumption
    records: Callable[[], list[TrialRecord]]
    elapsed_s: Callable[[], float]
    say: Callable[[str], None]
    beats: Heartbeats
    """The driver's heartbeats: a trial is held from the moment it is asked for."""
    rests: Rests = field(default_factory=Rests)
    rows: dict[str, PlanRow] = field(default_factory=dict)
    """The plan's rows by candidate digest (``judge`` decides for a candidate the plan did not list)."""
    ended: str | None = None
    """Why the search stopped before its candidates ran out (budget, convergence)."""
    _repeats: int = 0

    @property
    def study(self) -> optuna.Study:
        return self.search.study

    def next(self, host: PoolHost, stop: threading.Event, lock: threading.RLock) -> Picked | None:
        """The next trial for ``host``, its attributes written; None when the search is over. It
        waits while another trial holds the host, while the host rests after a refused claim, and
        while no candidate is left but other drivers' trials run (one whose driver dies comes back
        to the queue)."""
        at = place(host, self.driver.machine)
        said: str | None = None
        while not stop.is_set():
            with lock:
                found = self._next(host, at)
            if not isinstance(found, _Wait):
                return found
            if found.reason and found.reason != said:
                self.say(found.reason)
                said = found.reason
            stop.wait(found.seconds)
        return None

    def _next(self, host: PoolHost, at: str) -> Picked | _Wait | None:
        self.resumption.take_over_stale()
        found = self.records()
        self.ended = over_budget(self.plan.campaign.budget, found, self.elapsed_s())
        if self.ended is not None:
            return None
        if exhausted(self.plan, self.search.strategy, found):
            elsewhere = [r for r in found if r.state == "RUNNING" and r.driver != self.driver]
            if not elsewhere:
                return None
            return _Wait(
                f"no candidate left to start; waiting for the {len(elsewhere)} trial(s) other drivers run "
                "(a trial whose driver dies comes back to the queue)"
            )
        busy = holder(found, at)
        if busy is not None:
            return _Wait(f"{host.name} is held by {busy.stack} ({_whose(busy)}); waiting for it")
        if self.rests.resting(host.name):
            return _Wait("")
        return self._ask(host, at)

    def _ask(self, host: PoolHost, at: str) -> Picked | _Wait | None:
        """Ask the study for a trial and take ``host`` for it; a wait when the suggestion needs no
        launch (the checks run again first) or another trial took the host at the same moment."""
        trial, candidate = self.search.ask()
        self.beats.hold(trial._trial_id)
        stack = trial_stack_name(self.plan.name, candidate)
        queued = dict(trial.user_attrs)  # an enqueued trial's (grid, or one run again)
        written: dict[str, Any] = {
            "stack": stack,
            "labels": candidate.labels,
            "flags": self.search.space.flags(candidate),
            "driver": self.driver,
        }
        write_attributes(self.study, trial._trial_id, **written)
        # Read again: a driver on another machine may have begun the same candidate meanwhile.
        earlier = earlier_trial(self.records(), stack, trial.number)
        if earlier is not None:
            self.search.tell_duplicate(trial, earlier, written)
            self.beats.release(trial._trial_id)
            self._repeats += 1
            if self._repeats >= MAX_REPEATS:
                self.ended = f"converged: the last {MAX_REPEATS} suggestions were candidates already run"
                return None
            return _AGAIN
        row = self.rows.get(candidate.digest) or judge(self.plan.name, self.plan.campaign, candidate)
        if row.verdict == "discarded":
            self.search.tell_infeasible(trial, row, written)
            self.beats.release(trial._trial_id)
            why = row.reasons[0].split(":", 1)[0] if row.reasons else "preflight"
            self.say(f"{stack} discarded by preflight ({why}); nothing launched")
            return _AGAIN
        self._repeats = 0
        running = {
            "status": "running",
            "host": host.name,
            "host_gpus": host.gpu_count,
            "gpus": row.spec.serving_gpus if row.spec else 1,
            "started_at": time.time(),
            "host_place": at,  # written last: the host is held from here on
        }
        write_attributes(self.study, trial._trial_id, **running)
        attributes = TrialAttributes.model_validate(queued | written | running)
        rival = holder(self.records(), at, trial._trial_id)
        if rival is not None:  # both took the host at once: both give way, and try again apart
            message = f"{host.name} was taken for {rival.stack} at the same moment"
            self.search.requeue(trial, attributes, "held", message)
            self.beats.release(trial._trial_id)
            return _Wait(f"{stack}: {message}; back to the queue", give_way_s())
        return Picked(trial, row, attributes)


@dataclass(frozen=True)
class _Wait:
    """Why a host's worker waits (said once), and for how long before it looks again."""

    reason: str
    seconds: float = POLL_S


_AGAIN = _Wait("", 0.0)
"""Look again at once: the suggestion needed no launch."""


def _whose(record: TrialRecord) -> str:
    driver = record.driver
    if driver is None:
        return "a driver"
    return f"the sweep run of pid {driver.pid} on {driver.machine}"
