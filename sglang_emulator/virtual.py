"""The emulator's scheduler in virtual time, for benchmarks that work out what it would serve.

``VirtualEngine`` is ``Engine`` without its thread: each step's deadline is reached at once, so
a benchmark of minutes runs in milliseconds with the same admission, chunking, retraction and
step times as the served emulator. Generated text is left out (nothing reads it), chunks are not
queued, and a request's latency is measured on the virtual clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sglang_emulator.engine import Chunk, Engine, Request
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.pool_limits import PoolLimits
from sglang_world.scheduling import SchedulingRules

__all__ = ["VirtualEngine"]

_QUIET = logging.getLogger("sglang_emulator.virtual")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
_QUIET.setLevel(logging.CRITICAL + 1)


class VirtualEngine(Engine):
    """The scheduler stepped by ``advance`` on a clock (``now_s``) that starts at 0."""

    def __init__(
        self,
        model: PerformanceModel,
        limits: PoolLimits,
        rules: SchedulingRules,
        seed: int,
        on_request_done: Callable[[Request], None] | None = None,
        log: logging.Logger = _QUIET,
        before_prefill: Callable[[int], None] | None = None,
    ) -> None:
        self.now_s = 0.0
        super().__init__(model, limits, rules, seed, log, on_request_done, before_prefill)

    def submit(self, request: Request) -> None:
        """Queue ``request``, arriving now."""
        request.created_s = self.now_s
        super().submit(request)

    @property
    def busy(self) -> bool:
        """Whether anything waits, runs or is half prefilled."""
        return self._busy

    def advance(self, until_s: float | None = None) -> None:
        """Step until nothing is left to do, or until a step would start at or after ``until_s``;
        an idle scheduler's clock then moves to ``until_s``."""
        while self._busy and (until_s is None or self.now_s < until_s):
            if self._step(self.now_s) is None:
                break
        if until_s is not None and self.now_s < until_s:
            self.now_s = until_s

    def _sleep_until(self, deadline: float, precise: bool = False) -> float:
        self.now_s = deadline
        return deadline

    def _now(self) -> float:
        return self.now_s

    def _generate(self, request: Request, count: int) -> tuple[list[int], str]:
        return [0] * count, ""

    def _deliver(self, request: Request, chunk: Chunk) -> None:
        pass
