"""The contract of ``port_probe.py``: a port of the GPU host checked from the host itself, whether
a program listens there and how SGLang's generation health check answers. ``server.sh`` runs it
(its ``PORT_PROBE``) with the server's Python."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import POSITIONAL, Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult

__all__ = [
    "PORT_PROBE",
    "HealthAnswer",
    "Healthy",
    "Listening",
    "PortHealth",
    "PortProbeExit",
    "PortProbeMode",
]


class PortProbeMode(StrEnum):
    """What ``port_probe.py`` checks."""

    LISTENING = "listening"
    HEALTHY = "healthy"
    HEALTH = "health"


class PortProbeExit(ProgramExit):
    """How ``port_probe.py`` ends."""

    YES = 0
    """listening, healthy: yes; health: it printed the answer."""
    NO = 1
    """listening: nothing accepts connections there; healthy: the health check failed."""
    UNKNOWN_MODE = 2, HostError
    """A mode it does not know, or a port that is no number."""


PORT_PROBE = Program(file="port_probe.py", exits=PortProbeExit, error=HostError, modes=PortProbeMode)
"""``port_probe.py``."""

Port = Annotated[int, POSITIONAL]


class Listening(Request[bool]):
    """``listening``: whether a program accepts connections on the port."""

    program: ClassVar[Program] = PORT_PROBE
    mode: ClassVar[PortProbeMode] = PortProbeMode.LISTENING

    port: Port

    def answer(self, conn: Connection, result: CommandResult) -> bool:
        return result.exit_code == PortProbeExit.YES


class Healthy(Listening):
    """``healthy``: whether SGLang's ``/health_generate`` answers 200."""

    mode: ClassVar[PortProbeMode] = PortProbeMode.HEALTHY


class PortHealth(StrEnum):
    """How the server on the port answers its generation health check."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    """Another status, or the connection refused or closed."""
    UNRESPONSIVE = "unresponsive"
    """No answer within the program's wait."""


class HealthAnswer(Request[PortHealth]):
    """``health``: how the health check answers."""

    program: ClassVar[Program] = PORT_PROBE
    mode: ClassVar[PortProbeMode] = PortProbeMode.HEALTH

    port: Port

    def answer(self, conn: Connection, result: CommandResult) -> PortHealth:
        return PortHealth(result.stdout.strip())
