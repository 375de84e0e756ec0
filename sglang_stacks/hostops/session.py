"""A script left running on a host and talked to line by line: the script sees end of file on
stdin when the session is closed or this process ends, which is how a host learns that the update
holding it is over."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import threading
import time
from collections.abc import Mapping

from sglang_stacks.errors import HostError
from sglang_stacks.hostops._output import last_lines, said_last
from sglang_stacks.hostops._ssh_errors import ssh_failure
from sglang_stacks.hostops._wire import SESSION_MARKER, WireExit, command_line, spawn
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.transport import _exports

__all__ = ["Session", "open_session"]


class Session:
    """A script left running on the host, talked to through its stdin and stdout.

    Made by `open_session`. The script ends when the session is closed, or when this process
    ends: either way its stdin reaches end of file.
    """

    def __init__(self, conn: Connection, process: subprocess.Popen[bytes]) -> None:
        self.conn = conn
        self._process = process
        self._pending = bytearray()
        self._stderr = bytearray()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    @property
    def alive(self) -> bool:
        """Whether the script (and its SSH session) still runs."""
        return self._process.poll() is None

    def read_line(self, *, timeout_s: float) -> str:
        """The script's next line of output; HostError if the session ends or stays silent."""
        stdout = self._process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                self.close()
                raise HostError(
                    f"{self.conn.label} did not answer within {timeout_s:g} s; the session was closed. "
                    "Check that the host is up and responsive, then run the update again."
                )
            ready, _, _ = select.select([stdout], [], [], remaining_s)
            if not ready:
                continue
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                raise self._ended()
            self._pending.extend(chunk)
        line, _, rest = bytes(self._pending).partition(b"\n")
        self._pending = bytearray(rest)
        return line.decode(errors="replace")

    def send(self, data: bytes) -> bool:
        """Writes to the script's stdin; False once the session has ended."""
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(data)
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return False
        return True

    def close(self, *, timeout_s: float = 10) -> None:
        """Ends the script's stdin and waits for it to finish (killing the session after ``timeout_s``)."""
        with contextlib.suppress(BrokenPipeError, OSError):
            assert self._process.stdin is not None
            self._process.stdin.close()
        try:
            self._process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _drain_stderr(self) -> None:
        stderr = self._process.stderr
        assert stderr is not None
        while chunk := os.read(stderr.fileno(), 65536):
            self._stderr.extend(chunk)

    def _ended(self) -> HostError:
        self.close(timeout_s=5)
        lines = self._stderr.decode(errors="replace").splitlines()
        stderr = "\n".join(line for line in lines if not line.startswith(SESSION_MARKER))
        if self.conn.kind == "ssh" and self._process.returncode == WireExit.SSH_FAILED:
            return ssh_failure(self.conn, stderr)
        last = last_lines(stderr)
        return HostError(
            f"The session with {self.conn.label} ended (exit {self._process.returncode}). "
            f"{said_last(last)} Check the host's logs and run the update again.",
            last_output=last,
        )


def open_session(
    conn: Connection, script: str, *, env: Mapping[str, str] | None = None, max_lifetime_s: float = 86400
) -> Session:
    """Starts a bash script on the host and leaves it running, to talk to through a `Session`.

    The script reads the caller's messages on stdin and answers on stdout, one line each; it sees
    end of file on stdin when the session is closed or this process ends. The host stops it
    after ``max_lifetime_s`` in any case.
    """
    body = (_exports(env) + script).encode()
    session = Session(conn, spawn(conn, command_line(conn)))
    session.send(f"{SESSION_MARKER} {max_lifetime_s:g} {len(body)}\n".encode() + body)
    return session
