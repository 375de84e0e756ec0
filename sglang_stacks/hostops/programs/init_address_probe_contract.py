"""The contract of ``init_address_probe.py``: a multi-node server's init address checked from one
of its hosts: rank 0's host must be able to listen there, every other node must reach it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, ClassVar

from sglang_stacks.errors import HostError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import POSITIONAL, Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult

__all__ = [
    "INIT_ADDRESS_PROBE",
    "AddressVerdict",
    "InitAddressExit",
    "InitAddressMode",
    "Join",
    "Listen",
    "Verdict",
]


class InitAddressMode(StrEnum):
    """Which side of the rendezvous is checked."""

    JOIN = "join"
    """A node other than rank 0: does it reach the address?"""
    HOST = "host"
    """Rank 0: can it listen at the address?"""


class InitAddressExit(ProgramExit):
    """How ``init_address_probe.py`` ends."""

    ANSWERED = 0
    """It printed its verdict."""
    UNKNOWN_MODE = 2, HostError
    """A mode it does not know, or a port that is no number."""


INIT_ADDRESS_PROBE = Program(
    file="init_address_probe.py", exits=InitAddressExit, error=HostError, modes=InitAddressMode
)
"""``init_address_probe.py``."""


class Verdict(StrEnum):
    """The first word of the program's answer."""

    FREE = "free"
    IN_USE = "in-use"
    NOT_LOCAL = "not-local"
    """The address is not one of this host's."""
    REACHABLE = "reachable"
    UNRESOLVED = "unresolved"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class AddressVerdict:
    """The answer: the verdict and the reason the host gave."""

    verdict: Verdict
    reason: str

    @property
    def usable(self) -> bool:
        """Whether the rendezvous can form there from this host's side. A port in use on rank 0's
        host may be held by the server a takeover is about to stop; if it stays taken, SGLang's own
        bind error says so."""
        return self.verdict in (Verdict.FREE, Verdict.REACHABLE, Verdict.IN_USE)

    def __str__(self) -> str:
        return f"{self.verdict} {self.reason}".strip()


class Join(Request[AddressVerdict]):
    """``join``: whether this host reaches ``host:port``."""

    program: ClassVar[Program] = INIT_ADDRESS_PROBE
    mode: ClassVar[InitAddressMode] = InitAddressMode.JOIN
    default_limit_s: ClassVar[float] = 60.0

    host: Annotated[str, POSITIONAL]
    port: Annotated[int, POSITIONAL]

    def answer(self, conn: Connection, result: CommandResult) -> AddressVerdict:
        word, _, reason = result.stdout.strip().partition(" ")
        if word not in set(Verdict):
            raise self.failure(conn, InitAddressExit.ANSWERED, result)
        return AddressVerdict(Verdict(word), reason)

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        return HostError(
            f"Could not check the init address {self.host}:{self.port} on {conn.label}: "
            f"{result.stderr.strip() or 'no answer'}. Check that the host has python3."
        )


class Listen(Join):
    """``host``: whether this host can listen at ``host:port``."""

    mode: ClassVar[InitAddressMode] = InitAddressMode.HOST
