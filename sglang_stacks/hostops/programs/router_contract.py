"""The contract of ``router.sh``: SGLang's router (the sglang-router package) on the machine that
fronts a fleet, started detached with no workers, noticed, stopped, and found again after a start
that was interrupted before it could answer."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, ClassVar

from sglang_stacks.errors import RouterError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import ON_HOST, Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult, tail

__all__ = [
    "ROUTER",
    "Leftover",
    "RouterAlive",
    "RouterExit",
    "RouterMode",
    "RouterProcess",
    "Start",
    "StopRouter",
]


class RouterMode(StrEnum):
    """What ``router.sh`` is asked to do."""

    START = "start"
    ALIVE = "alive"
    STOP = "stop"
    LEFTOVER = "leftover"


class RouterExit(ProgramExit):
    """How ``router.sh`` ends."""

    OK = 0
    """It did what the mode asks and printed its answer."""
    UNKNOWN_MODE = 2, RouterError
    """It was asked for a mode it does not know: this sglang-stacks and the program disagree."""
    WRONG_RELEASE = 10, RouterError
    """start: the Python has another sglang-router release (printed), or none."""
    PORT_TAKEN = 11, RouterError
    """start: something already answers on the router's port, so nothing was started."""
    NOT_LIVE = 12, RouterError
    """start: the router exited, or did not answer its liveness within the wait (printed, with
    its log's last lines)."""


ROUTER = Program(file="router.sh", exits=RouterExit, error=RouterError, modes=RouterMode)
"""``router.sh``."""


@dataclass(frozen=True)
class RouterProcess:
    """A router process: pid and start time identify it (pids are reused)."""

    pid: int
    start_ticks: int


class Start(Request[RouterProcess]):
    """``start``: the router on ``host:port`` with no workers, live when answered."""

    program: ClassVar[Program] = ROUTER
    mode: ClassVar[RouterMode] = RouterMode.START

    python: str
    """The Python that has sglang-router installed."""
    release: str
    """The sglang-router release it must have."""
    host: str
    port: int
    metrics_port: int
    policy: str
    health_interval_s: int
    log: Annotated[str, ON_HOST]
    pd_disaggregation: bool = False
    """Start in PD mode: workers are added as prefill (with their bootstrap port) or decode."""
    timeout_s: int
    """Whole seconds to wait for its liveness."""

    def run_limit_s(self) -> float:
        return self.limit_s or self.timeout_s + 30

    def answer(self, conn: Connection, result: CommandResult) -> RouterProcess:
        words = result.stdout.split()
        if words[:1] != ["ready"] or len(words) != 3:
            raise RouterError(
                f"SGLang's router on {self.host}:{self.port} answered {tail(result.stdout)!r} instead of "
                "its process. Check that the user's login prints nothing on non-interactive shells."
            )
        return RouterProcess(pid=int(words[1]), start_ticks=int(words[2]))

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        said = result.stdout.strip()
        if code is RouterExit.WRONG_RELEASE:
            return RouterError(
                f"fleet.router.release is {self.release}, but {self.python} has sglang-router "
                f"{said or 'none'}. Install it (`pip install sglang-router=={self.release}`, or the "
                "project's `fleet` extra) or set fleet.router.release to the installed release."
            )
        if code is RouterExit.PORT_TAKEN:
            return RouterError(
                f"Port {self.port} on {self.host} already answers, so the router was not started. Stop "
                "the program there or set fleet.router.port to a free port."
            )
        if code is RouterExit.NOT_LIVE:
            return RouterError(
                f"SGLang's router did not become live on {self.host}:{self.port} ({said}). "
                "Fix what its log names and run `pulumi up` again."
            )
        return super().failure(conn, code, result)


class RouterAlive(Request[bool]):
    """``alive``: whether the router started at ``start_ticks`` still runs."""

    program: ClassVar[Program] = ROUTER
    mode: ClassVar[RouterMode] = RouterMode.ALIVE

    pid: int
    start_ticks: int

    def answer(self, conn: Connection, result: CommandResult) -> bool:
        return result.stdout.strip() == "running"


class StopRouter(Request[None]):
    """``stop``: TERM, then KILL after ``timeout_s``, if it is still the router started at
    ``start_ticks``."""

    program: ClassVar[Program] = ROUTER
    mode: ClassVar[RouterMode] = RouterMode.STOP
    default_limit_s: ClassVar[float] = 60.0

    pid: int
    start_ticks: int
    timeout_s: int

    def answer(self, conn: Connection, result: CommandResult) -> None:
        return None


class Leftover(Request[RouterProcess | None]):
    """``leftover``: the router the last start with ``log`` launched, while it still runs (a start
    interrupted before it answered leaves one that no state knows)."""

    program: ClassVar[Program] = ROUTER
    mode: ClassVar[RouterMode] = RouterMode.LEFTOVER

    log: Annotated[str, ON_HOST]

    def answer(self, conn: Connection, result: CommandResult) -> RouterProcess | None:
        words = result.stdout.split()
        if words[:1] == ["running"] and len(words) == 3:
            return RouterProcess(pid=int(words[1]), start_ticks=int(words[2]))
        return None
