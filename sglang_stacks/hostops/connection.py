"""How a GPU host is reached: a typed, validated connection (SSH, or the local host)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sglang_stacks.errors import SpecError

if TYPE_CHECKING:
    from sglang_stacks.config.sections import HostSpec

__all__ = ["Connection"]

_HOST_OR_USER = re.compile(r"^[A-Za-z0-9_.:%\[\]-]+$")
_KEY_TYPES = re.compile(r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp\d+|sk-\S+)$")


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
            self.host_key_lines()

    @classmethod
    def local(cls) -> Connection:
        """The machine sglang-stacks runs on, reached with plain ``bash``."""
        return cls(kind="local")

    @classmethod
    def for_host(cls, host: HostSpec, private_key: str | None = None) -> Connection:
        """The connection of a stack file's host section, with the ``sshPrivateKey`` secret: the
        one place a host section becomes a connection, every option of the section kept (the
        emulator host is this machine)."""
        if host.kind == "emulator":
            return cls.local()
        return cls(
            host=host.address or "",
            port=host.port,
            user=host.user or "",
            private_key=private_key,
            host_key=host.host_key,
            connect_timeout_s=host.connect_timeout_s,
        )

    def host_key_lines(self) -> list[str]:
        """The pinned key as ``type base64`` lines; a leading host field from ssh-keyscan is dropped."""
        lines = []
        for raw in (self.host_key or "").strip().splitlines():
            words = raw.split()
            if not words or words[0].startswith("#"):
                continue
            if len(words) >= 3 and not _KEY_TYPES.match(words[0]):
                words = words[1:]
            if len(words) < 2 or not _KEY_TYPES.match(words[0]):
                raise SpecError(
                    f"Host key line {raw[:60]!r} is not an SSH public key; expected 'ssh-ed25519 AAAA...'. "
                    "Copy a line printed by `ssh-keyscan -p PORT HOST` into host.host_key."
                )
            lines.append(f"{words[0]} {words[1]}")
        if not lines:
            raise SpecError(
                "Host key is empty. Copy a line printed by `ssh-keyscan -p PORT HOST` into host.host_key."
            )
        return lines

    @property
    def label(self) -> str:
        """How messages name the host: ``user@host:port``, or ``the local host``."""
        if self.kind == "local":
            return "the local host"
        return f"{self.user}@{self.host}:{self.port}"
