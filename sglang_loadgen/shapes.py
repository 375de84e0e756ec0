"""Load shapes: a closed loop of streams that each send the next request when theirs ends, and an
open loop whose requests arrive at a rate (Poisson, or gamma with a burstiness), whatever the
server's state; either bounded by a request count or by a duration.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from .streaming import RequestRecord

__all__ = ["Send", "arrival_gaps_s", "closed_loop", "open_loop"]

Send = Callable[[], Awaitable[RequestRecord]]
"""Sends the run's next request and returns its record."""


async def closed_loop(send: Send, streams: int, total: int, duration_s: float) -> list[RequestRecord]:
    """``streams`` streams send until ``total`` requests are sent, or, with a duration, until it is over."""
    records: list[RequestRecord] = []
    deadline = time.perf_counter() + duration_s
    budget = [total]

    async def one_stream() -> None:
        # One event loop thread: the shared budget needs no lock.
        while True:
            if duration_s:
                if time.perf_counter() >= deadline:
                    return
            elif budget[0] <= 0:
                return
            budget[0] -= 1
            records.append(await send())

    count = streams if duration_s else min(streams, total)
    await asyncio.gather(*(one_stream() for _ in range(count)))
    return records


def arrival_gaps_s(rate: float, burstiness: float, rng: random.Random) -> Callable[[], float]:
    """Gaps between arrivals with mean ``1 / rate``: gamma with shape ``burstiness`` (1 is Poisson)."""
    scale = 1.0 / (rate * burstiness)
    return lambda: rng.gammavariate(burstiness, scale)


async def open_loop(
    send: Send, next_gap_s: Callable[[], float], total: int, duration_s: float
) -> list[RequestRecord]:
    """Requests at the arrival process's times, never waiting for earlier ones to finish."""
    tasks: list[asyncio.Task[RequestRecord]] = []
    start = time.perf_counter()
    due = start
    sent = 0
    while (duration_s and due - start < duration_s) or (not duration_s and sent < total):
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(send()))
        sent += 1
        due += next_gap_s()
    return list(await asyncio.gather(*tasks))
