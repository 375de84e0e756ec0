"""A real OpenSSH server on 127.0.0.1 for tests: a free port, a throwaway host key and client key.

    with start_sshd() as server:
        run(server.connection(), "echo hi", timeout_s=10)

The server runs as the current user and accepts only ``server.client_key``; it and its keys are
gone when the block ends. Without OpenSSH installed the tests fail with the command that installs it.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sglang_stacks.hostops.connection import Connection
from tests._ports import free_port

INSTALL_HINT = "OpenSSH is not installed here; run scripts/ensure-sshd.sh once, then the tests again."


@dataclass(frozen=True)
class SshServer:
    """A running test sshd and the keys that reach it."""

    host: str
    port: int
    user: str
    client_key: str
    """The client's private key, contents (what a Pulumi secret would hold)."""
    host_key: str
    """The server's public host key line, ``ssh-ed25519 AAAA...``."""
    folder: Path

    def connection(self, **changes: Any) -> Connection:
        """A pinned-key Connection to this server; ``changes`` override any field."""
        fields: dict[str, Any] = {
            "kind": "ssh",
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "private_key": self.client_key,
            "host_key": self.host_key,
            "connect_timeout_s": 5.0,
        }
        fields.update(changes)
        return Connection(**fields)

    def log(self) -> str:
        """What sshd printed so far (one line per connection and login, and errors)."""
        return (self.folder / "sshd.log").read_text(errors="replace")

    def connections(self) -> int:
        """How many SSH connections (TCP connections, so handshakes) sshd has accepted so far."""
        return self.log().count("Connection from ")

    def sessions(self) -> int:
        """How many remote commands (sessions, multiplexed or not) sshd has started so far."""
        return self.log().count("Starting session: ")


def new_key(folder: Path, name: str) -> tuple[str, str]:
    """Makes an ed25519 key pair in ``folder``; returns (private key contents, public key line)."""
    path = folder / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.read_text(), (folder / f"{name}.pub").read_text().strip()


def _sshd_binary() -> str:
    found = shutil.which("sshd") or ("/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None)
    if found is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    return found


@contextlib.contextmanager
def start_sshd(startup_timeout_s: float = 10.0) -> Iterator[SshServer]:
    """Starts sshd on a free port of 127.0.0.1 and stops it (and removes its keys) afterwards."""
    sshd = _sshd_binary()
    folder = Path(tempfile.mkdtemp(prefix="sglang-stacks-sshd-"))
    process: subprocess.Popen[bytes] | None = None
    try:
        os.chmod(folder, 0o700)
        client_key, client_public = new_key(folder, "client")
        new_key(folder, "host")
        host_key = " ".join((folder / "host.pub").read_text().split()[:2])
        (folder / "authorized_keys").write_text(client_public + "\n")
        port = free_port()
        config = folder / "sshd_config"
        config.write_text(
            f"Port {port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {folder / 'host'}\n"
            f"PidFile {folder / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {folder / 'authorized_keys'}\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "UsePAM no\n"
            # The key files live in a temporary folder, not in a home folder sshd would vet.
            "StrictModes no\n"
            "MaxStartups 64\n"
            "MaxSessions 64\n"
            # VERBOSE logs one "Connection from" line per accepted connection and one "Starting
            # session" line per remote command: the tests count handshakes and round trips with them.
            "LogLevel VERBOSE\n"
            # bash run by sshd sources ~/.bashrc when it is the top-level shell (SHLVL below 2).
            # The user here is this machine's, whose ~/.bashrc may start a Python version manager
            # (pyenv's: 62 bash processes and 0.25 CPU-s per remote command); a GPU host's login
            # shell is its owner's, and `docs/hosts.md` asks it to be quiet.
            "SetEnv SHLVL=1\n"
        )
        if os.geteuid() == 0:
            # sshd refuses to start without its privilege-separation folder.
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        log = (folder / "sshd.log").open("wb")
        process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
        log.close()
        _wait_listening(port, process, folder, startup_timeout_s)
        yield SshServer(
            host="127.0.0.1",
            port=port,
            user=getpass.getuser(),
            client_key=client_key,
            host_key=host_key,
            folder=folder,
        )
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_listening(port: int, process: subprocess.Popen[bytes], folder: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (folder / "sshd.log").read_text(errors="replace")
            raise RuntimeError(f"sshd exited at start (exit {process.returncode}): {log.strip()}")
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on 127.0.0.1:{port} within {timeout_s:g} s")
