"""Runs bash scripts on a GPU host and copies files to it: through the system OpenSSH client, or
directly with ``bash`` for the local (emulator) host. Every remote operation goes through here.

A script runs as ``bash`` on the host under ``timeout``, so a hung command cannot hang a deploy.
It must not leave the call open: a background process it starts keeps the output pipes (and so
the SSH session) open unless it is detached, always as
``setsid nohup COMMAND >LOG 2>&1 </dev/null &``. `run` notices a script that finished while a
background process still holds its output, and says so instead of waiting for the timeout.

Scripts on one SSH host are sessions of one connection per Pulumi command (``_ssh``): the
handshake is paid once, however many resources a command reads or changes.

`open_session` leaves a script running and talks to it line by line; the script sees end of file
on stdin when the session is closed or this process ends, which is how a host learns that the
update holding it is over.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import selectors
import shlex
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from sglang_stacks.config.names import is_env_name
from sglang_stacks.errors import HostError, SpecError, StacksError
from sglang_stacks.hostops._ssh import client_argv, host_key_lines, ssh_failure

__all__ = [
    "CommandResult",
    "Connection",
    "Session",
    "open_session",
    "quote",
    "quote_path",
    "run",
    "tail",
    "upload",
]

quote = shlex.quote
"""Quotes one value for bash; the only quoting function the components use."""

# Seconds the host-side `timeout` waits after TERM before it sends KILL.
_KILL_AFTER_S = 5
# Seconds of quiet after the script's end after which its output is taken as held open.
_LINGER_S = 3.0
# Ends a session's script on the host's stderr; nothing waits for it.
_SESSION_MARKER = "__sglang_stacks_session"
_HOST_OR_USER = re.compile(r"^[A-Za-z0-9_.:%\[\]-]+$")

# Runs on the host. Reads one header line "<marker> <timeout_s> <script_bytes>", then exactly that
# many bytes of script; whatever follows on stdin is the script's own stdin. The script travels
# on stdin, never on a command line, because the env it exports may hold secrets. The marker line
# written after the script ends lets the caller tell the script's end from the session's end.
_BOOTSTRAP = r"""
IFS=' ' read -r marker limit_s length || { echo "sglang-stacks: no script received" >&2; exit 2; }
LC_ALL=C IFS= read -r -N "$length" script
if ! command -v timeout >/dev/null 2>&1; then
    echo "sglang-stacks: the host has no 'timeout' command; install coreutils" >&2
    exit 2
fi
timeout -k KILL_AFTER "$limit_s" bash <(printf '%s' "$script")
rc=$?
printf '\n%s %s\n' "$marker" "$rc" >&2
exit "$rc"
""".replace("KILL_AFTER", str(_KILL_AFTER_S))


@dataclass(frozen=True)
class Connection:
    """How to reach a GPU host: ``kind="ssh"`` with an address and key, or ``kind="local"``.

    ``private_key`` is the key's contents (from a Pulumi secret): it never appears in ``repr``,
    on a command line, in an error or on any filesystem: it reaches the SSH client as an in-memory
    file that ends with the client (see ``_ssh``).
    ``host_key`` pins the host's public key (a line such as ``ssh-ed25519 AAAA...``, as printed
    by ``ssh-keyscan``); without it the host must already be in the user's known_hosts, unless
    ``insecure_skip_host_key_check`` is set, which trusts whatever answers at that address.
    """

    kind: Literal["local", "ssh"] = "ssh"
    host: str = ""
    port: int = 22
    user: str = "root"
    private_key: str | None = field(default=None, repr=False)
    host_key: str | None = None
    insecure_skip_host_key_check: bool = False
    connect_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        # Numbers come back from Pulumi's state as floats: 22.0 is port 22.
        port: object = self.port
        if isinstance(port, float) and port.is_integer():
            object.__setattr__(self, "port", int(port))
        elif not isinstance(port, int) or isinstance(port, bool):
            raise SpecError(f"SSH port {self.port!r} is not a whole number. Set host.port to sshd's port.")
        if self.kind not in ("local", "ssh"):
            raise SpecError(
                f"Connection kind {self.kind!r} is not known; allowed: 'ssh' or 'local'. "
                "Set host.kind to one of them."
            )
        if not self.connect_timeout_s > 0:
            raise SpecError(
                f"Connection connect_timeout_s is {self.connect_timeout_s}; it must be above 0. "
                "Set a positive number of seconds."
            )
        if self.kind == "local":
            return
        if not self.host or not _HOST_OR_USER.match(self.host) or self.host.startswith("-"):
            raise SpecError(
                f"SSH host {self.host!r} is not a host name or address. "
                "Set host.address to the GPU host's name or IP address."
            )
        if not self.user or not _HOST_OR_USER.match(self.user) or self.user.startswith("-"):
            raise SpecError(
                f"SSH user {self.user!r} is not a user name. Set host.user to the login on the GPU host."
            )
        if not 1 <= self.port <= 65535:
            raise SpecError(f"SSH port {self.port} is outside 1..65535. Set host.port to sshd's port.")
        if self.host_key is not None:
            host_key_lines(self.host_key)

    @classmethod
    def local(cls) -> Connection:
        """The machine sglang-stacks runs on, reached with plain ``bash``."""
        return cls(kind="local")

    @property
    def label(self) -> str:
        """How messages name the host: ``user@host:port``, or ``the local host``."""
        if self.kind == "local":
            return "the local host"
        return f"{self.user}@{self.host}:{self.port}"


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

    return _execute(conn, _exports(env) + script, timeout_s=timeout_s, feed=feed)


def upload(
    conn: Connection, local_path: str | os.PathLike[str], remote_path: str, *, timeout_s: float = 600
) -> None:
    """Copies a file or a folder to ``remote_path`` on the host, as a tar stream over the session.

    A file replaces ``remote_path`` in one rename. A folder's contents are written into
    ``remote_path`` (created when missing); files already there with other names stay.
    Symbolic links are followed, so the host receives what they point to.
    """
    source = Path(local_path)
    if not source.exists():
        raise StacksError(f"Upload source {str(source)!r} does not exist. Check the local path.")
    dest = quote_path(remote_path)
    if source.is_dir():
        script = f"set -e\nmkdir -p {dest}\ntar -x -f - -C {dest} --no-same-owner\n"
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
        raise HostError(
            f"Copying {str(source)!r} to {remote_path!r} on {conn.label} failed (exit {result.exit_code}): "
            f"{_tail(result.stderr)} Check that the user may write there and the disk has room."
        )


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
        stderr = "\n".join(line for line in lines if not line.startswith(_SESSION_MARKER))
        if self.conn.kind == "ssh" and self._process.returncode == 255:
            return ssh_failure(self.conn, stderr)
        return HostError(
            f"The session with {self.conn.label} ended (exit {self._process.returncode}). "
            f"{_tail(stderr)} Check the host's logs and run the update again."
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
    session = Session(conn, _spawn(conn, _command_line(conn)))
    session.send(f"{_SESSION_MARKER} {max_lifetime_s:g} {len(body)}\n".encode() + body)
    return session


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _exports(env: Mapping[str, str] | None) -> str:
    """``export NAME=value`` lines for the top of a script, every value quoted."""
    for name in env or {}:
        if not is_env_name(name):
            raise SpecError(
                f"Environment variable name {name!r} is not valid for bash; use letters, digits and "
                "underscores, not starting with a digit."
            )
    return "".join(f"export {name}={quote(value)}\n" for name, value in (env or {}).items())


def _command_line(conn: Connection) -> list[str]:
    """The argv that runs the bootstrap on the host: plain bash, or a session of the host's master."""
    if conn.kind == "local":
        return ["bash", "-c", _BOOTSTRAP]
    return client_argv(conn, "bash -c " + quote(_BOOTSTRAP))


def _execute(
    conn: Connection, script: str, *, timeout_s: float, feed: Callable[[IO[bytes]], None]
) -> CommandResult:
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be above 0, not {timeout_s}")
    marker = "__sglang_stacks_done_" + os.urandom(8).hex()
    body = script.encode()
    header = f"{marker} {timeout_s:g} {len(body)}\n".encode()
    # The host stops the script at timeout_s; this deadline only covers a session that hangs.
    deadline_s = timeout_s + _KILL_AFTER_S + conn.connect_timeout_s + 10
    started = time.monotonic()
    process = _spawn(conn, _command_line(conn))

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
    stdout, stderr, outcome = _collect(process, marker.encode(), started + deadline_s)
    if outcome != "closed":
        process.kill()
    process.wait()
    writer.join(timeout=5)
    elapsed_s = time.monotonic() - started
    return _result(conn, process.returncode, stdout, stderr, marker, outcome, timeout_s, elapsed_s)


def _spawn(conn: Connection, argv: list[str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise HostError(
            f"`{argv[0]}` is not installed on this machine, so {conn.label} cannot be reached. "
            "Install the OpenSSH client (scripts/ensure-sshd.sh does) and run the update again."
        ) from None


def _collect(
    process: subprocess.Popen[bytes], marker: bytes, deadline: float
) -> tuple[bytes, bytes, Literal["closed", "held", "hung"]]:
    """Reads stdout and stderr until both close, the output is held open, or the deadline."""
    buffers = {process.stdout: bytearray(), process.stderr: bytearray()}
    selector = selectors.DefaultSelector()
    for pipe in buffers:
        assert pipe is not None
        selector.register(pipe, selectors.EVENT_READ)
    last_data = time.monotonic()
    outcome: Literal["closed", "held", "hung"] = "closed"
    with selector:
        while selector.get_map():
            for key, _ in selector.select(timeout=0.1):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    buffers[key.fileobj].extend(chunk)  # type: ignore[index]
                    last_data = time.monotonic()
                else:
                    selector.unregister(key.fileobj)
            now = time.monotonic()
            if now - last_data > _LINGER_S and marker in buffers[process.stderr]:
                outcome = "held"
                break
            if now > deadline:
                outcome = "hung"
                break
    return bytes(buffers[process.stdout]), bytes(buffers[process.stderr]), outcome


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
    found = re.search(r"\n?" + marker + r" (\d+)\n", err_text)
    if found is None:
        if outcome == "hung":
            raise HostError(
                f"{conn.label} did not answer within {elapsed_s:.0f} s; the session was closed. "
                "Check that the host is up and responsive, then run the update again."
            )
        if conn.kind == "ssh" and returncode == 255:
            raise ssh_failure(conn, err_text)
        raise HostError(
            f"The session with {conn.label} ended before the script finished (exit {returncode}). "
            f"{_tail(err_text)} Check the host's logs (out of memory, reboot) and run the update again."
        )
    exit_code = int(found.group(1))
    script_stderr = err_text[: found.start()]
    if outcome != "closed":
        raise HostError(
            f"A script on {conn.label} finished (exit {exit_code}) but a background process it started "
            "still holds its output open. Start background processes detached, as "
            "`setsid nohup COMMAND >LOG 2>&1 </dev/null &`."
        )
    if exit_code in (124, 137) and elapsed_s >= timeout_s:
        raise HostError(
            f"A script on {conn.label} did not finish within {timeout_s:g} s and was stopped there. "
            f"{_tail(script_stderr or out_text)} Raise the timeout if the work is slow, or find what hangs."
        )
    return CommandResult(exit_code=exit_code, stdout=out_text, stderr=script_stderr)


def _tail(text: str, lines: int = 5) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    if not kept:
        return "It printed nothing."
    return "Last output: " + " | ".join(kept) + "."
