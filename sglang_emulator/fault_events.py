"""When the injected faults fire and how the server then goes down. Each fires on one of the
server's own events (ready, a generation request received, one finished), so a drill lands at the
same point of a benchmark however slowly a loaded machine runs it; only ``crash_after_s`` also
counts seconds from the moment the server is ready.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from sglang_emulator.engine import Engine
from sglang_emulator.faults import Faults
from sglang_emulator.state import StateDir

__all__ = ["FaultEvents", "crash"]

_NCCL_ABORT = "[TP0] Scheduler hit an exception: RuntimeError: NCCL communicator was aborted on rank 0"


def crash(state: StateDir, log_line: str) -> None:
    """Die the way SGLang does when a scheduler child fails: the launcher kills its whole tree."""
    print(log_line, file=sys.stderr, flush=True)
    print(
        "Received sigquit from a child process. It usually means the child failed.",
        file=sys.stderr,
        flush=True,
    )
    state.remove()
    os.kill(os.getpid(), signal.SIGKILL)


class FaultEvents:
    """The server's events the faults wait for; each method is called by the server as it happens."""

    def __init__(self, faults: Faults, state: StateDir, engine: Engine, log: logging.Logger) -> None:
        self._faults = faults
        self._state = state
        self._engine = engine
        self._log = log
        self._finished = 0
        self._lock = threading.Lock()

    def became_ready(self, set_ready: Callable[[], None]) -> None:
        """The ready line is logged; ``set_ready`` lets health checks answer 200. ``crash_after_s: 0``
        crashes before it does, so whoever checks sees a server that exited right after its ready
        line, however the checks and the crash interleave; a later crash serves until then."""
        after_s = self._faults.crash_after_s
        if after_s is None:
            set_ready()
            return
        if after_s > 0:
            set_ready()
            time.sleep(after_s)
        crash(self._state, f"{_NCCL_ABORT} (sglang-emulator injected fault: crash_after_s={after_s:g})")

    def received(self, number: int) -> None:
        """The ``number``-th generation request (1-based) arrived: ``crash_at_request`` aborts the
        communicator while it is in flight, so it is never answered."""
        if number == self._faults.crash_at_request:
            crash(self._state, f"{_NCCL_ABORT} (sglang-emulator injected fault: crash_at_request={number})")

    def finished(self) -> None:
        """A generation request was answered in full: counts them for ``crash_after_requests`` and
        ``hang_after_requests``."""
        with self._lock:
            self._finished += 1
            count = self._finished
        limit = self._faults.crash_after_requests
        if limit is not None and count >= limit:
            crash(
                self._state,
                f"[TP0] Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access "
                f"was encountered (sglang-emulator injected fault: crash_after_requests={limit})",
            )
        if count == self._faults.hang_after_requests:
            # A stuck collective prints nothing in SGLang; the line says the silence is injected.
            self._log.info(
                "sglang-emulator injected fault: hang_after_requests=%d: the scheduler makes no more "
                "progress; the process stays alive",
                count,
            )
            self._engine.stall()
