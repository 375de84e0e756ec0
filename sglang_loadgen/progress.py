"""The progress file a person can follow while a benchmark runs (``sglang-stacks logs -f``, and
``pulumi up`` itself): one JSON line when a phase starts and every few seconds, with the level,
the repetition, tok/s so far and the errors.

tok/s so far is the output tokens streamed since the phase began, those of requests still in
flight included, over the time since it began: the rate of the work done so far. Counting only
finished requests would make it fall between two completions (a request of 512 tokens counts
nothing until its last one), and read like a collapse while the server decodes steadily.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

__all__ = ["LINE_PREFIX", "TICK_S", "Progress"]

TICK_S = 2.0
"""Seconds between two progress lines within a repetition."""
LINE_PREFIX = '{"time_unix_s"'
"""How every progress line starts, which tells it from the document in one stream (a Job's log)."""


class Progress:
    """Counts streamed tokens and finished requests, and appends progress lines to ``path``
    (nothing when it is empty)."""

    def __init__(self, path: str, clock: Callable[[], float] = time.perf_counter) -> None:
        """``clock`` gives the seconds elapsed since any fixed moment."""
        self._path = path
        self._clock = clock
        self._state: dict[str, Any] = {"level": "", "phase": "prepare", "repetition": 0, "of": 0}
        self._since_s = self._clock()
        self._tokens = 0
        self._requests = 0
        self._errors = 0
        self._last_error: str | None = None

    def streamed(self, tokens: int) -> None:
        """``tokens`` output tokens arrived (of any request, finished or not)."""
        self._tokens += tokens

    def count(self, error: str | None) -> None:
        """One request finished, with ``error`` when it failed."""
        self._requests += 1
        if error is not None:
            self._errors += 1
            self._last_error = error

    def phase(self, level: str, phase: str, repetition: int, of: int) -> None:
        """A phase begins: its counters restart, and a line says so."""
        if phase == "done":
            self.write()
        self._state = {"level": level, "phase": phase, "repetition": repetition, "of": of}
        self._since_s = self._clock()
        self._tokens = self._requests = self._errors = 0
        self._last_error = None
        self.write()

    def write(self) -> None:
        """Append the current state as one line."""
        if not self._path:
            return
        elapsed_s = self._clock() - self._since_s
        line = {
            "time_unix_s": round(time.time(), 3),
            **self._state,
            "requests_done": self._requests,
            "tok_s_so_far": round(self._tokens / elapsed_s, 1) if elapsed_s > 0 else 0.0,
            "errors": self._errors,
            "last_error": self._last_error,
        }
        with open(self._path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")

    @contextlib.asynccontextmanager
    async def ticking(self) -> AsyncIterator[None]:
        """Write a line every ``TICK_S`` while the body runs."""
        if not self._path:
            yield
            return

        async def tick() -> None:
            while True:
                await asyncio.sleep(TICK_S)
                self.write()

        task = asyncio.ensure_future(tick())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
