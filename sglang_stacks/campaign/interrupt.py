"""Ctrl-C during ``sweep run``. The terminal sends it to the whole job: each trial's Pulumi process
stops the step it is in, and this process is told at the same moment. Python runs the handler in
the main thread when that thread next runs, which may be after a worker has seen its Pulumi process
end; ``CtrlC`` also has the signal's arrival written down at once (Python's own C-level handler
writes it to a wakeup socket, in whichever thread takes the signal), so the worker knows its trial
was interrupted, not failed, without waiting for the main thread's handler. The thread the kernel
gives the signal to writes it down only once it runs: a worker whose step failed waits up to
``JUDGING_WAIT_S`` for it before it judges the failure the trial's.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from types import FrameType, TracebackType
from typing import Any

__all__ = ["JUDGING_WAIT_S", "CtrlC"]

JUDGING_WAIT_S = 1.0
"""How long a worker whose step failed waits for a Ctrl-C that may have ended it to be written down
before it judges the failure the trial's (only failures wait)."""
_POLL_S = 0.01


class CtrlC:
    """Within ``with`` in the main thread: Ctrl-C sets ``stop`` and raises KeyboardInterrupt in the
    main thread, and ``arrived`` says at once, in any thread, that it came. Off the main thread, or
    with Ctrl-C ignored (a background job), nothing is installed: ``arrived`` is ``stop`` alone."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self._sockets: tuple[socket.socket, socket.socket] | None = None
        """Where the arrival is written down: the end read here, the end given to ``set_wakeup_fd``."""
        self._previous: tuple[Any, int] = (None, -1)

    def arrived(self, within_s: float = 0.0) -> bool:
        """Ctrl-C reached this process (or the sweep was told to stop), or does within ``within_s``.
        The kernel gives a signal sent to the whole job to one thread of this process, which writes
        it down once it next runs: a worker whose Pulumi process the same Ctrl-C ended can see that
        end first, on a busy machine, and waits a moment for the note before judging the failure."""
        deadline = time.monotonic() + within_s
        while True:
            if self.stop.is_set() or self._written():
                return True
            if self._sockets is None or time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)

    def _written(self) -> bool:
        """The signal's arrival is written down on the wakeup socket."""
        if self._sockets is None:
            return False
        try:
            written = self._sockets[0].recv(4096, socket.MSG_PEEK)
        except (BlockingIOError, OSError):
            return False  # no signal written down (or the socket closed as the sweep ends)
        return bytes([signal.SIGINT]) in written

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.stop.set()
        raise KeyboardInterrupt

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is not threading.main_thread():
            return self
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            return self  # started with Ctrl-C ignored: it stays so
        self._sockets = socket.socketpair()
        for end in self._sockets:
            end.setblocking(False)
        previous_fd = signal.set_wakeup_fd(self._sockets[1].fileno(), warn_on_full_buffer=False)
        self._previous = (signal.signal(signal.SIGINT, self._handle), previous_fd)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._sockets is None:
            return
        handler, wakeup_fd = self._previous
        if handler is not None:  # None: a handler not set from Python, which cannot be set back
            signal.signal(signal.SIGINT, handler)
        signal.set_wakeup_fd(wakeup_fd)
        for end in self._sockets:
            end.close()
        self._sockets = None
