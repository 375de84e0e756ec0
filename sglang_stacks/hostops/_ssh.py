"""The OpenSSH side of the transport: one multiplexed connection per Pulumi command and host.

Every script runs as a session of a master connection (OpenSSH ``ControlMaster``), so a command
pays one handshake per host however many resources it reads or changes, in the program and in
the provider processes alike. The master belongs to the Pulumi CLI process this process runs
under (or to this process when there is none): its control socket lives in a 0700 folder named
after that process, a reaper ends the masters and removes the folder when that process ends,
and an idle master ends by itself after `_IDLE_S` in any case.

The private key never touches a filesystem: it is written to an in-memory file
(``memfd_create``) handed to the master as its stdin and read as ``-i /proc/self/fd/0``; the
sessions run through the master and need no key.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from sglang_stacks.errors import HostError
from sglang_stacks.hostops._ssh_errors import ssh_failure
from sglang_stacks.hostops.command_folder import answers, update_folder
from sglang_stacks.hostops.connection import Connection

__all__ = ["client_argv"]

# Seconds an unused master stays up after its last session: a safety net behind the reaper.
_IDLE_S = 300
# Name the pinned host key is filed under in the update's known_hosts file; it keeps the
# `[host]:port` spelling of known_hosts out of the way.
_HOST_KEY_ALIAS = "sglang-stacks-pinned-host"


def client_argv(conn: Connection, remote_command: str) -> list[str]:
    """The argv of one session that runs ``remote_command`` on the host through its master,
    which is started first when this update has none for the host yet."""
    control_path, known_hosts = _ensure_master(conn)
    return [
        "ssh",
        "-T",
        "-o", "ControlMaster=no",
        "-o", f"ControlPath={control_path}",
        *_options(conn, known_hosts),
        "--", conn.host, remote_command,
    ]  # fmt: skip


def _options(conn: Connection, known_hosts: Path) -> list[str]:
    """Options the master and its sessions share (a session falls back to them when the master
    is gone in the instant between the check and its start)."""
    argv = [
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={math.ceil(conn.connect_timeout_s)}",
        "-o", "ServerAliveInterval=15",
        "-o", "ServerAliveCountMax=4",
        "-o", "LogLevel=ERROR",
        "-o", "ClearAllForwardings=yes",
        "-p", str(conn.port),
        "-l", conn.user,
    ]  # fmt: skip
    if conn.host_key is not None:
        argv += [
            "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"HostKeyAlias={_HOST_KEY_ALIAS}",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "UpdateHostKeys=no",
        ]  # fmt: skip
    elif conn.insecure_skip_host_key_check:
        argv += [
            "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null",
            "-o", "GlobalKnownHostsFile=/dev/null",
        ]  # fmt: skip
    else:
        argv += ["-o", "StrictHostKeyChecking=yes"]
    return argv


def _ensure_master(conn: Connection) -> tuple[Path, Path]:
    """The control socket of this update's master for ``conn`` (and its known_hosts file),
    starting the master if it is not running. One process at a time starts it, so concurrent
    first calls share one handshake."""
    folder = update_folder()
    name = _connection_digest(conn)
    control_path, known_hosts = folder / f"{name}.sock", folder / f"{name}.known"
    if answers(control_path):
        return control_path, known_hosts
    with _locked(folder / f"{name}.lock"):
        if answers(control_path):
            return control_path, known_hosts
        with contextlib.suppress(FileNotFoundError):
            control_path.unlink()  # a master that died leaves its socket behind
        if conn.host_key is not None:
            lines = "".join(f"{_HOST_KEY_ALIAS} {line}\n" for line in conn.host_key_lines())
            known_hosts.write_text(lines)
        _start_master(conn, control_path, known_hosts)
    return control_path, known_hosts


def _start_master(conn: Connection, control_path: Path, known_hosts: Path) -> None:
    argv = [
        "ssh",
        "-M", "-N", "-f",
        "-o", f"ControlPath={control_path}",
        "-o", f"ControlPersist={_IDLE_S}",
        *_options(conn, known_hosts),
    ]  # fmt: skip
    with _key_in_memory(conn.private_key) as key_fd:
        if key_fd is not None:
            argv += ["-i", "/proc/self/fd/0", "-o", "IdentitiesOnly=yes"]
        try:
            # -f: the client returns once authenticated, leaving the master in the background.
            started = subprocess.run(
                [*argv, "--", conn.host],
                stdin=key_fd if key_fd is not None else subprocess.DEVNULL,
                capture_output=True,
                timeout=2 * conn.connect_timeout_s + 30,
                check=False,
            )
        except FileNotFoundError:
            raise HostError(
                f"`ssh` is not installed on this machine, so {conn.label} cannot be reached. "
                "Install the OpenSSH client (scripts/ensure-sshd.sh does) and run the update again."
            ) from None
        except subprocess.TimeoutExpired:
            raise HostError(
                f"No answer from {conn.host}:{conn.port} within {conn.connect_timeout_s:g} s. Check the "
                "address, the firewall and that the host is up; raise the connect timeout for slow networks."
            ) from None
    if started.returncode != 0:
        raise ssh_failure(conn, started.stderr.decode(errors="replace"))


@contextlib.contextmanager
def _key_in_memory(private_key: str | None) -> Iterator[int | None]:
    """An anonymous in-memory file holding the key, 0600 as ssh demands; gone when closed."""
    if private_key is None:
        yield None
        return
    fd = os.memfd_create("sglang-stacks-key", os.MFD_CLOEXEC)
    try:
        os.write(fd, (private_key.replace("\r\n", "\n").strip() + "\n").encode())
        os.fchmod(fd, 0o600)
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _connection_digest(conn: Connection) -> str:
    # Another key or pinned host key is another master: a session never rides on a connection
    # authenticated or verified differently from what its own stack says.
    parts = (conn.user, conn.host, str(conn.port), conn.private_key or "", conn.host_key or "")
    material = "\0".join((*parts, str(conn.insecure_skip_host_key_check)))
    return hashlib.sha256(material.encode()).hexdigest()[:20]
