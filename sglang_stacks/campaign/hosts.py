"""The pool's hosts as several drivers share them. A host is named by its place (where its GPUs
are and which folder holds their claim), the same whichever driver's pool lists it and by what
name; a trial running there holds the host, recorded in the study as its ``host_place``, and no
other driver starts a trial on a held host: its worker waits, and the driver's other hosts go on.

Two workers that take a free host at the same moment both see the other when they read the study
again after writing their own trial: both give way (their trials go back to the queue) and try
again after a random pause. A host whose claim another stack holds (one outside the campaign, or a
race the study did not see) sends its trial back to the queue too, and rests before it is tried
again, longer each time (``Rests``).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.config.sections import HostSpec

__all__ = ["HOST_FAILURES", "POLL_S", "REST_S", "Rests", "give_way_s", "holder", "place"]

POLL_S = 2.0
"""How often a worker whose host is held reads the study again."""
REST_S = (30.0, 60.0, 120.0, 240.0, 300.0)
"""How long a host whose claim was refused rests before it is tried again, after each refusal in a
row (the last, from then on)."""
HOST_FAILURES = 3
"""Trials in a row a pool host may fail itself (unreachable, not its declared facts) before it takes
no more in this run: each goes back to the queue, never charged to its candidate."""


def place(host: PoolHost, machine: str) -> str:
    """Where ``host``'s GPUs are, as every driver names them: an ssh host by its user, address, port
    and claim folder; an emulator host by the machine it runs on (``machine``, the driver's) and
    its claim folder's absolute path; a pool fleet by its hosts' places, joined by ``+``."""
    return "+".join(_place(spec, machine) for spec in host.machines)


def _place(spec: HostSpec, machine: str) -> str:
    if spec.kind == "ssh":
        return f"ssh://{spec.user}@{spec.address}:{spec.port}/{spec.state_dir}"
    return f"emulator://{machine}{os.path.abspath(os.path.expanduser(spec.state_dir))}"


def holder(found: Sequence[TrialRecord], at: str, trial_id: int | None = None) -> TrialRecord | None:
    """The running trial, other than ``trial_id``, that holds the host at ``at``; None when it is
    free. (A trial whose driver died stops holding it once its heartbeat is stale and another
    driver has failed it.)"""
    return next(
        (r for r in found if r.state == "RUNNING" and r.host_place == at and r.trial_id != trial_id), None
    )


def give_way_s() -> float:
    """A random pause, so that two workers that took one host at once do not meet again."""
    return random.uniform(0.5, 3.0)


@dataclass
class Rests:
    """When each pool host (by name) may be tried again after its claim was refused."""

    _until: dict[str, float] = field(default_factory=dict)
    _refusals: dict[str, int] = field(default_factory=dict)
    _failures: dict[str, int] = field(default_factory=dict)

    def refused(self, host: str, *, by_itself: bool = False) -> float:
        """Note a trial ``host`` could not run: its claim was refused, or (``by_itself``) the host
        itself failed it (unreachable, or not what the pool says); the seconds it now rests."""
        count = self._refusals.get(host, 0)
        self._refusals[host] = count + 1
        if by_itself:
            self._failures[host] = self._failures.get(host, 0) + 1
        rest = REST_S[min(count, len(REST_S) - 1)]
        self._until[host] = time.monotonic() + rest
        return rest

    def served(self, host: str) -> None:
        """``host`` ran a trial: its next refusal rests it the shortest time again."""
        self._refusals.pop(host, None)
        self._failures.pop(host, None)

    def out(self, host: str) -> bool:
        """Whether ``host`` failed ``HOST_FAILURES`` trials in a row itself: it takes no more this run."""
        return self._failures.get(host, 0) >= HOST_FAILURES

    def resting(self, host: str) -> bool:
        """Whether ``host`` rests now."""
        return time.monotonic() < self._until.get(host, 0.0)
