"""The contract of ``server.sh``: the SGLang server process on the GPU host, launched detached,
waited for, asked how it is, stopped once its GPU memory is free."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, ClassVar, get_args

from pydantic import Field

from sglang_stacks.errors import Cause, ServerError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import ON_HOST, Program, ProgramExit, Request
from sglang_stacks.hostops.server_failure import Health, ServerState
from sglang_stacks.hostops.transport import CommandResult

__all__ = [
    "SERVER",
    "Alive",
    "Launch",
    "Launched",
    "LogTail",
    "Readiness",
    "Ready",
    "ReadyVerdict",
    "ServerExit",
    "ServerMode",
    "State",
    "Stop",
    "Stopped",
]

# Seconds the program may take beyond its own waits.
_SLACK_S = 30.0
_LOG_MARK = "---log---\n"


class ServerMode(StrEnum):
    """What ``server.sh`` is asked to do."""

    LAUNCH = "launch"
    READY = "ready"
    STOP = "stop"
    ALIVE = "alive"
    STATE = "state"
    LOG_TAIL = "log-tail"


class ServerExit(ProgramExit):
    """How ``server.sh`` ends."""

    OK = 0
    """It did what the mode asks and printed its answer."""
    UNKNOWN_MODE = 2, ServerError
    """It was asked for a mode it does not know: this sglang-stacks and the program disagree."""
    PORT_TAKEN = 10, ServerError
    """launch: another program already answers on the server's port, so nothing was started."""
    STILL_HELD = 11, ServerError
    """stop: processes of the server still hold GPU memory after the stop's wait."""


SERVER = Program(
    file="server.sh",
    exits=ServerExit,
    error=ServerError,
    modes=ServerMode,
    companions={
        "PORT_PROBE": "port_probe.py",
        "CLAIM_PROGRAM": "claim.py",
        "SYSTEM_PYTHON": "system_python.sh",
    },
)
"""``server.sh``; it runs ``port_probe.py`` (the port and the health) and, at a launch, ``claim.py``
with ``system_python.sh`` (the claim's note of the server)."""

HostFile = Annotated[str, ON_HOST]


@dataclass(frozen=True)
class Launched:
    """A launch's answer: the process started, and the claim's note of it."""

    pid: int
    start_ticks: int | None
    """Its start time (clock ticks since boot); None when it was gone before it could be read:
    it failed at once."""
    claim_line: str
    """The claim program's answer to noting the server (`claim_contract`), when asked to."""


class Launch(Request[Launched]):
    """``launch``: starts ``command`` detached, logging to ``log``."""

    program: ClassVar[Program] = SERVER
    mode: ClassVar[ServerMode] = ServerMode.LAUNCH
    default_limit_s: ClassVar[float] = 60.0

    python: str
    """The host's Python that runs the port check."""
    port: int
    log: HostFile
    command: str
    """``[VAR=value ...] python -m <launcher> <argv>``, shell-quoted."""
    claim_stack: str = ""
    """When set, the stack whose claim notes the server in this same run."""
    state_dir: str = ""
    """The host's folder of sglang-stacks state, where the claim is."""
    secret_env: dict[str, str] = Field(default_factory=dict, repr=False, exclude=True)
    """Variables the server inherits without any command line showing them (a hub token)."""

    def variables(self) -> dict[str, str]:
        return super().variables() | self.secret_env

    def answer(self, conn: Connection, result: CommandResult) -> Launched:
        first, _, noted = result.stdout.partition("\n")
        words = first.split()
        if not words or not words[0].isdigit():
            raise ServerError(
                f"SGLang's launch on {conn.label} answered {result.stdout.strip()[:200]!r} instead of its "
                "process id. Check that the user's login prints nothing on non-interactive shells.",
                cause=Cause.HOST,
            )
        ticks = int(words[1]) if len(words) > 1 else None
        return Launched(pid=int(words[0]), start_ticks=ticks, claim_line=noted.strip())

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        if code is ServerExit.PORT_TAKEN:
            return ServerError(
                f"Port {self.port} on {conn.label} is taken by another program, so SGLang was not "
                "started (its health check would have reached that program). Stop the program "
                f"(`ss -ltnp 'sport = :{self.port}'` on the host names it) or set server.port to a free "
                "port.",
                cause=Cause.PORT_IN_USE,
            )
        return super().failure(conn, code, result)


class ReadyVerdict(StrEnum):
    """How the wait for a server's readiness ended."""

    READY = "ready"
    EXITED = "exited"
    TIMEOUT = "timeout"
    UNCHECKED = "unchecked"
    """The program's answer could not be read."""


@dataclass(frozen=True)
class Readiness:
    """``ready``'s answer: how the wait ended, and the log's last lines."""

    verdict: ReadyVerdict
    log_tail: str


def _verdict_and_log(stdout: str) -> tuple[str, str]:
    verdict, _, log_tail = stdout.partition(_LOG_MARK)
    return verdict.strip(), log_tail


class Ready(Request[Readiness]):
    """``ready``: waits until the server answers its health check (or its log shows ``ready_line``)."""

    mode: ClassVar[ServerMode] = ServerMode.READY
    program: ClassVar[Program] = SERVER

    pid: int
    start_ticks: int
    python: str
    port: int
    timeout_s: int
    """Whole seconds to wait."""
    log: HostFile
    tail_lines: int
    ready_line: str = ""

    def run_limit_s(self) -> float:
        return self.timeout_s + _SLACK_S

    def answer(self, conn: Connection, result: CommandResult) -> Readiness:
        said, log_tail = _verdict_and_log(result.stdout)
        known = said if said in set(ReadyVerdict) else ReadyVerdict.UNCHECKED
        return Readiness(ReadyVerdict(known), log_tail)


@dataclass(frozen=True)
class Stopped:
    """``stop``'s answer."""

    was_running: bool
    """False: it had already ended; only its GPU memory was waited for."""


class Stop(Request[Stopped]):
    """``stop``: TERM, then KILL, then wait until the server's GPU memory is free."""

    mode: ClassVar[ServerMode] = ServerMode.STOP
    program: ClassVar[Program] = SERVER

    pid: int
    start_ticks: int | None
    nvidia_smi: tuple[str, ...]
    """nvidia-smi's argv on the host."""
    timeout_s: int

    def run_limit_s(self) -> float:
        return self.timeout_s + _SLACK_S

    def answer(self, conn: Connection, result: CommandResult) -> Stopped:
        return Stopped(was_running=result.stdout.split()[1:2] == ["running"])

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        if code is ServerExit.STILL_HELD:
            return ServerError(
                f"SGLang (pid {self.pid}) on {conn.label} stopped, but processes "
                f"{', '.join(result.stdout.split())} still hold GPU memory after {self.timeout_s:g} s. "
                "Check `nvidia-smi` on the host and stop them.",
                cause=Cause.GPU_MEMORY_HELD,
            )
        return super().failure(conn, code, result)


class Alive(Request[bool]):
    """``alive``: whether the process started at ``start_ticks`` still runs."""

    mode: ClassVar[ServerMode] = ServerMode.ALIVE
    program: ClassVar[Program] = SERVER

    pid: int
    start_ticks: int

    def answer(self, conn: Connection, result: CommandResult) -> bool:
        return result.stdout.strip() == "running"


class State(Request[ServerState]):
    """``state``: whether the server still runs and how it answers, and its log's last lines."""

    mode: ClassVar[ServerMode] = ServerMode.STATE
    program: ClassVar[Program] = SERVER
    default_limit_s: ClassVar[float] = _SLACK_S + 15

    pid: int
    start_ticks: int
    python: str
    port: int
    log: HostFile
    tail_lines: int

    def answer(self, conn: Connection, result: CommandResult) -> ServerState:
        said, log_tail = _verdict_and_log(result.stdout)
        health = next((known for known in get_args(Health) if known == said), None)
        if health is None:
            raise ServerError(
                f"The state of SGLang (pid {self.pid}) on {conn.label} could not be read ({said!r}). "
                "Check that the server's Python environment is complete.",
                cause=Cause.HOST,
            )
        return ServerState(health, log_tail)


class LogTail(Request[str]):
    """``log-tail``: the last lines of the server's log (empty when there is none)."""

    mode: ClassVar[ServerMode] = ServerMode.LOG_TAIL
    program: ClassVar[Program] = SERVER

    log: HostFile
    tail_lines: int

    def answer(self, conn: Connection, result: CommandResult) -> str:
        return result.stdout
