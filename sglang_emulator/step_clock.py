"""The wall clock a served scheduler's steps keep: absolute deadlines, a core kept for a step a
client waits on alone, and a busy host's debt caught up."""

from __future__ import annotations

import time

__all__ = ["sleep_until"]

_MAX_CATCH_UP_S = 1.0
_SPIN_S = 0.005


def sleep_until(deadline: float, precise: bool = False) -> float:
    """Wait for ``deadline``; ``precise`` for a step a client waits on alone (a first or a last
    token): a thread woken by its timer on a busy host gets a core milliseconds late, so it
    wakes ``_SPIN_S`` early and keeps its core (yielding the GIL) until the deadline."""
    now = time.monotonic()
    if deadline > now:
        if not precise:
            time.sleep(deadline - now)
            return deadline
        if deadline - now > _SPIN_S:
            time.sleep(deadline - now - _SPIN_S)
        while time.monotonic() < deadline:
            time.sleep(0)
        return deadline
    # Behind because the machine's CPU was busy elsewhere (a GPU does not slow down with its host's
    # load): catch up, so the emitted rate stays the model's. A stall longer than a second (a
    # stopped process, a suspended machine) restarts the clock rather than bursting out of it.
    return now if now - deadline > _MAX_CATCH_UP_S else deadline
