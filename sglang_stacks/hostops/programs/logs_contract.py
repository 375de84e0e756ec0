"""The contract of ``logs.sh``: a stack's server log and benchmark progress, shown once or
followed (``sglang-stacks logs``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, TypeVar

from pydantic import Field

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import ON_HOST, Program, ProgramExit, Request
from sglang_stacks.hostops.session import Session
from sglang_stacks.hostops.transport import CommandResult

__all__ = ["LOGS", "FollowLogs", "FollowProgress", "LogsExit", "LogsMode", "ShowLogs"]


class LogsMode(StrEnum):
    """What ``logs.sh`` is asked to do."""

    SHOW = "show"
    FOLLOW = "follow"
    PROGRESS = "progress"


class LogsExit(ProgramExit):
    """How ``logs.sh`` ends."""

    OK = 0
    """It showed the files, or its follower went away (its stdin ended)."""
    UNKNOWN_MODE = 2, HostError
    """It was asked for a mode it does not know: this sglang-stacks and the program disagree."""


LOGS = Program(file="logs.sh", exits=LogsExit, error=HostError, modes=LogsMode)
"""``logs.sh``."""


AnswerT = TypeVar("AnswerT")


class _LogsCall(Request[AnswerT]):
    """Where a stack's logs are on its host."""

    program: ClassVar[Program] = LOGS

    log_dir: Annotated[str, ON_HOST]
    """The folder of the server's logs; each launch writes ``<stack>-<12 hex digits>.log``."""
    stack: str
    progress: Annotated[str, ON_HOST]
    """The benchmark's progress file (absent until the first benchmark)."""
    lines: int = Field(ge=0)
    """Lines of each file shown first."""


class ShowLogs(_LogsCall[list[str]]):
    """``show``: the last lines of the newest server log and of the progress file, each file's
    lines after a ``==> <path> <==`` line."""

    mode: ClassVar[LogsMode] = LogsMode.SHOW
    default_limit_s: ClassVar[float] = 60.0

    def answer(self, conn: Connection, result: CommandResult) -> list[str]:
        return result.stdout.splitlines()


class FollowLogs(_LogsCall[Session]):
    """``follow``: the same, then every new line, the newest server log followed as launches come;
    the answer is the session to read them from, which ends the program when closed."""

    mode: ClassVar[LogsMode] = LogsMode.FOLLOW
    held: ClassVar[bool] = True

    def held_answer(self, conn: Connection, session: Session) -> Session:
        return session


class FollowProgress(Request[Session]):
    """``progress``: empties the progress file of a benchmark about to start, then prints each
    line the benchmark writes to it; the answer is the session to read them from, once the file is
    empty (a line read later is this benchmark's, never the previous one's)."""

    program: ClassVar[Program] = LOGS
    mode: ClassVar[LogsMode] = LogsMode.PROGRESS
    held: ClassVar[bool] = True

    progress: Annotated[str, ON_HOST]
    """The benchmark's progress file."""

    def held_answer(self, conn: Connection, session: Session) -> Session:
        said = session.read_line(timeout_s=conn.connect_timeout_s + 30)
        if said != "ready":
            raise HostError(
                f"Following the benchmark's progress on {conn.label} did not start (it said {said!r}). "
                "Check that the host's state folder is writable."
            )
        return session
