"""Runs bash scripts on a GPU host and copies files to it: through the system OpenSSH client, or
directly with ``bash`` for the local (emulator) host. Every remote operation goes through here.

A script runs as ``bash`` on the host under ``timeout`` (the bootstrap of ``_wire``), so a hung
command cannot hang a deploy.
It must not leave the call open: a background process it starts keeps the output pipes (and so
the SSH session) open unless it is detached, always as
``setsid nohup COMMAND >LOG 2>&1 </dev/null &``. `run` notices a script that finished while a
background process still holds its output, and says so instead of waiting for the timeout.

Scripts on one SSH host are sessions of one connection per Pulumi command (``_ssh``): the
handshake is paid once, however many resources a command reads or changes.

``session`` leaves a script running and talks to it line by line; ``connection`` says how a
host is reached.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import tarfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sglang_stacks.config.names import is_env_name
from sglang_stacks.errors import HostError, SpecError
from sglang_stacks.hostops import _batch
from sglang_stacks.hostops._output import last_lines, said_last
from sglang_stacks.hostops._ssh_errors import ssh_failure
from sglang_stacks.hostops._wire import KILL_AFTER_S, WireExit, collect, command_line, spawn
from sglang_stacks.hostops.cancel import Cancelled
from sglang_stacks.hostops.connection import Connection

__all__ = [
    "CommandResult",
    "HostPath",
    "gathering",
    "quote",
    "quote_path",
    "run",
    "tail",
    "upload",
]

quote = shlex.quote
"""Quotes one value for bash; the only quoting function the components use."""


@dataclass(frozen=True)
class CommandResult:
    """What a script printed and how it exited; ``stdout``/``stderr`` decoded as UTF-8."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """True when the script exited 0."""
        return self.exit_code == 0


def tail(text: str, lines: int = 12) -> str:
    """The last non-blank ``lines`` of ``text``, joined with `` | `` for a one-paragraph message."""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


class HostPath(str):
    """A path on the host, as a variable of a script (`run`'s ``env``): a leading ``~/`` (or ``~``
    alone) is the home folder of the host's user, expanded on the host by `quote_path`."""

    __slots__ = ()


def quote_path(path: str) -> str:
    """Quotes a host path for bash, keeping a leading ``~/`` as the host user's home folder."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + quote(path[2:])
    return quote(path)


def run(
    conn: Connection,
    script: str,
    *,
    timeout_s: float,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Runs a bash script on the host and returns its exit code and output.

    ``env`` is exported at the top of the script (sshd's AcceptEnv is not needed); ``stdin`` is
    what the script reads. A script still running after ``timeout_s`` is stopped on the host and
    HostError is raised, as it is when the host cannot be reached or authenticated.
    """

    def feed(pipe: IO[bytes]) -> None:
        if stdin:
            pipe.write(stdin)

    if stdin is None and _batch.active():
        # A refresh's reads of one host share one session (`gathering`).
        def execute(combined: str, limit_s: float) -> tuple[int, str, str]:
            result = _execute(conn, combined, timeout_s=limit_s, feed=feed)
            return result.exit_code, result.stdout, result.stderr

        code, stdout, stderr, elapsed_s = _batch.run(conn, _exports(env) + script, timeout_s, execute)
        if code in (WireExit.TIMED_OUT, WireExit.KILLED) and elapsed_s >= timeout_s:
            raise _timed_out(conn, timeout_s, stderr or stdout)
        return CommandResult(exit_code=code, stdout=stdout, stderr=stderr)
    return _execute(conn, _exports(env) + script, timeout_s=timeout_s, feed=feed)


def gathering() -> contextlib.AbstractContextManager[None]:
    """Inside the block, scripts this thread runs without stdin may share one session with those
    other threads run on the same host at about the same time (a refresh's reads)."""
    return _batch.gathering()


def upload(
    conn: Connection,
    local_path: str | os.PathLike[str],
    remote_path: str,
    *,
    timeout_s: float = 600,
    fresh: bool = False,
) -> None:
    """Copies a file or a folder to ``remote_path`` on the host, as a tar stream over the session.

    A file replaces ``remote_path`` in one rename. A folder's contents are written into
    ``remote_path`` (created when missing); files already there with other names stay, unless
    ``fresh``: then the folder is emptied first, so it holds the upload and nothing else (a staging
    folder an earlier attempt left files in). Symbolic links are followed, so the host receives
    what they point to.
    """
    source = Path(local_path)
    if not source.exists():
        raise SpecError(f"Upload source {str(source)!r} does not exist. Check the local path.")
    dest = quote_path(remote_path)
    if source.is_dir():
        empty = f"rm -rf -- {dest}\n" if fresh else ""
        script = f"set -e\n{empty}mkdir -p {dest}\ntar -x -f - -C {dest} --no-same-owner\n"
    else:
        script = (
            "set -e\n"
            f"dest={dest}\n"
            'parent=$(dirname "$dest")\n'
            'mkdir -p "$parent"\n'
            'staging=$(mktemp -d "$parent/.upload.XXXXXX")\n'
            "trap 'rm -rf \"$staging\"' EXIT\n"
            'tar -x -f - -C "$staging" --no-same-owner\n'
            'mv -f "$staging/payload" "$dest"\n'
        )

    def feed(pipe: IO[bytes]) -> None:
        with tarfile.open(fileobj=pipe, mode="w|", dereference=True) as archive:
            archive.add(source, arcname="." if source.is_dir() else "payload", filter=_anonymous)

    result = _execute(conn, script, timeout_s=timeout_s, feed=feed)
    if not result.ok:
        last = last_lines(result.stderr)
        raise HostError(
            f"Copying {str(source)!r} to {remote_path!r} on {conn.label} failed (exit {result.exit_code}): "
            f"{said_last(last)} Check that the user may write there and the disk has room.",
            last_output=last,
        )


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _exports(env: Mapping[str, str] | None) -> str:
    """``export NAME=value`` lines for the top of a script, every value quoted (a `HostPath` with
    its ``~/`` left to the host's shell)."""
    for name in env or {}:
        if not is_env_name(name):
            raise SpecError(
                f"Environment variable name {name!r} is not valid for bash; use letters, digits and "
                "underscores, not starting with a digit."
            )
    return "".join(
        f"export {name}={quote_path(value) if isinstance(value, HostPath) else quote(value)}\n"
        for name, value in (env or {}).items()
    )


def _execute(
    conn: Connection, script: str, *, timeout_s: float, feed: Callable[[IO[bytes]], None]
) -> CommandResult:
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be above 0, not {timeout_s}")
    marker = "__sglang_stacks_done_" + os.urandom(8).hex()
    body = script.encode()
    header = f"{marker} {timeout_s:g} {len(body)}\n".encode()
    # The host stops the script at timeout_s; this deadline only covers a session that hangs.
    deadline_s = timeout_s + KILL_AFTER_S + conn.connect_timeout_s + 10
    started = time.monotonic()
    process = spawn(conn, command_line(conn))

    def write_request() -> None:
        pipe = process.stdin
        assert pipe is not None
        with contextlib.suppress(BrokenPipeError, ValueError, OSError):
            pipe.write(header + body)
            feed(pipe)
        with contextlib.suppress(BrokenPipeError, OSError):
            pipe.close()

    writer = threading.Thread(target=write_request, daemon=True)
    writer.start()
    stdout, stderr, outcome = collect(process, marker.encode(), started + deadline_s)
    if outcome != "closed":
        process.kill()
    process.wait()
    writer.join(timeout=5)
    elapsed_s = time.monotonic() - started
    return _result(conn, process.returncode, stdout, stderr, marker, outcome, timeout_s, elapsed_s)


def _result(
    conn: Connection,
    returncode: int,
    stdout: bytes,
    stderr: bytes,
    marker: str,
    outcome: str,
    timeout_s: float,
    elapsed_s: float,
) -> CommandResult:
    err_text = stderr.decode(errors="replace")
    out_text = stdout.decode(errors="replace")
    if outcome == "cancelled":
        raise Cancelled(
            f"The update was cancelled (Ctrl-C) while a step ran on {conn.label}; the script it ran "
            "there was stopped."
        )
    found = re.search(r"\n?" + marker + r" (\d+)\n", err_text)
    if found is None:
        if outcome == "hung":
            raise HostError(
                f"{conn.label} did not answer within {elapsed_s:.0f} s; the session was closed. "
                "Check that the host is up and responsive, then run the update again."
            )
        if conn.kind == "ssh" and returncode == WireExit.SSH_FAILED:
            raise ssh_failure(conn, err_text)
        last = last_lines(err_text)
        raise HostError(
            f"The session with {conn.label} ended before the script finished (exit {returncode}). "
            f"{said_last(last)} Check the host's logs (out of memory, reboot) and run the update again.",
            last_output=last,
        )
    exit_code = int(found.group(1))
    script_stderr = err_text[: found.start()]
    if outcome != "closed":
        raise HostError(
            f"A script on {conn.label} finished (exit {exit_code}) but a background process it started "
            "still holds its output open. Start background processes detached, as "
            "`setsid nohup COMMAND >LOG 2>&1 </dev/null &`."
        )
    if exit_code in (WireExit.TIMED_OUT, WireExit.KILLED) and elapsed_s >= timeout_s:
        raise _timed_out(conn, timeout_s, script_stderr or out_text)
    return CommandResult(exit_code=exit_code, stdout=out_text, stderr=script_stderr)


def _timed_out(conn: Connection, timeout_s: float, output: str) -> HostError:
    last = last_lines(output)
    return HostError(
        f"A script on {conn.label} did not finish within {timeout_s:g} s and was stopped there. "
        f"{said_last(last)} Raise the timeout if the work is slow, or find what hangs.",
        last_output=last,
    )
