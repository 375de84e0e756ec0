"""Start an emulated server as a child process and wait for it: for tests and demos.

``with start_emulator(["--model", "m", "--tp", "8"]) as server: ...`` runs
``python -m sglang_emulator`` on a free port with a fast time scale, waits for ``/health`` to
answer 200 (or for the process to exit), and stops it on leaving the block.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

__all__ = ["RunningEmulator", "free_port", "start_emulator"]


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RunningEmulator:
    """A child emulator process and where to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    _log_file: IO[bytes] | None = field(repr=False, default=None)
    _kept: str | None = field(repr=False, default=None)
    """The log's text once stopped: its file is removed then."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        """Everything the process printed so far (stdout and stderr together)."""
        if self._kept is not None:
            return self._kept
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float) -> bool:
        """True once ``/health`` answers 200; False if the process exits first or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=1) as reply:
                    if reply.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.02)
        return False

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after five seconds; returns the exit code. The log's file goes,
        its text stays (``log()``)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
            self._kept = self.log()
            self.log_path.unlink(missing_ok=True)
        return int(self.process.returncode)

    def __enter__(self) -> RunningEmulator:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_emulator(
    flags: list[str],
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    time_scale: float = 0.002,
    state_dir: str | None = None,
    wait: bool = True,
    timeout_s: float = 30.0,
) -> RunningEmulator:
    """Launch ``python -m sglang_emulator <flags> --port <port>``; wait for readiness if ``wait``.

    ``--port`` is appended unless ``flags`` already has one. ``env`` adds to the current
    environment (e.g. ``SGLANG_EMULATOR_FAULTS``). The log goes to a temporary file, removed when
    the emulator is stopped (``log()`` still gives its text).
    """
    chosen_port = port or free_port()
    argv = list(flags)
    if "--port" not in argv:
        argv += ["--port", str(chosen_port)]
    child_env = dict(os.environ)
    child_env["SGLANG_EMULATOR_TIME_SCALE"] = str(time_scale)
    if state_dir is not None:
        child_env["SGLANG_EMULATOR_STATE_DIR"] = state_dir
    child_env.update(env or {})
    package_root = str(Path(__file__).resolve().parent.parent)
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, child_env.get("PYTHONPATH")) if p)
    log_fd, log_name = tempfile.mkstemp(prefix="sglang-emulator-", suffix=".log")
    log_file = os.fdopen(log_fd, "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "sglang_emulator", *argv],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=child_env,
    )
    running = RunningEmulator(process, chosen_port, Path(log_name), log_file)
    if wait:
        running.wait_ready(timeout_s)
    return running
