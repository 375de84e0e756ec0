"""The contract of ``claim.py``: the GPU claim on the host, read, decided and written under one
``flock`` by the host's system python3. Every mode answers one JSON line; ``acquire`` then holds
the host's update lock for as long as its session lives."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, ClassVar, Generic, TypeVar

from pydantic import ConfigDict, ValidationError

from sglang_stacks.errors import ClaimError, HostError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import POSITIONAL, Program, ProgramExit, Request
from sglang_stacks.hostops.session import Session
from sglang_stacks.hostops.transport import CommandResult
from sglang_stacks.shape import Shape

__all__ = [
    "CLAIM",
    "Acquire",
    "Check",
    "ClaimAnswer",
    "ClaimExit",
    "ClaimMode",
    "ClaimRecord",
    "Held",
    "Outcome",
    "Read",
    "RecordServer",
    "Release",
]


AnswerT = TypeVar("AnswerT")


class ClaimMode(StrEnum):
    """What ``claim.py`` is asked to do (its first argument)."""

    READ = "read"
    RELEASE = "release"
    CHECK = "check"
    RECORD_SERVER = "record-server"
    ACQUIRE = "acquire"


class ClaimExit(ProgramExit):
    """How ``claim.py`` ends; every decision is an answer (`Outcome`), not an exit code."""

    ANSWERED = 0
    """It printed its answer."""
    CRASHED = 1, HostError
    """Python stopped it with an error (its traceback on stderr): the state folder cannot be
    written, or the host's python3 is broken."""
    UNKNOWN_MODE = 2, HostError
    """argparse refused the command line: a mode or an option it does not know."""


CLAIM = Program(file="claim.py", exits=ClaimExit, error=HostError, modes=ClaimMode)
"""``claim.py``."""


class Outcome(StrEnum):
    """What the claim program decided."""

    READ = "read"
    ACQUIRED = "acquired"
    BUSY = "busy"
    """acquire: another update holds the host's update lock."""
    HELD = "held"
    """acquire: another stack owns the claim and no takeover is allowed."""
    RELEASED = "released"
    NOT_OWNER = "not-owner"
    """release: another stack owns the claim (or none does); nothing changed."""
    LOST = "lost"
    """check, record-server: the stack no longer owns the claim."""
    OK = "ok"
    LOCK_TIMEOUT = "lock-timeout"
    """The claim lock stayed taken for the whole wait."""
    CORRUPT = "corrupt"
    """The claim file is not a claim."""


class ClaimRecord(Shape):
    """The claim file's object: the stack that owns the host's GPUs (times in UTC, ISO 8601)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    stack: str
    project: str = ""
    claimed_at: str = ""
    update_id: str = ""
    updating_since: str | None = None
    server_pid: int | None = None
    server_start_ticks: int | None = None


class ClaimAnswer(Shape):
    """The program's answer line."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    outcome: Outcome
    claim: ClaimRecord | None = None
    """The claim after the decision (for a refusal: the one that refused)."""
    previous: ClaimRecord | None = None
    """acquire: the claim of another stack it took over; release: the claim it removed."""
    updating: bool = False
    """Whether an update holds the host's update lock."""

    @classmethod
    def from_line(cls, conn: Connection, line: str, folder: str, lock_wait_s: float) -> ClaimAnswer:
        """The answer in ``line``; ClaimError when the claim lock or the claim file is unusable,
        HostError when the line is no answer."""
        try:
            answer = cls.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            raise HostError(
                f"The GPU claim on {conn.label} answered {line[-200:]!r} instead of JSON. "
                "Check that the user's login prints nothing on non-interactive shells."
            ) from None
        if answer.outcome is Outcome.LOCK_TIMEOUT:
            raise ClaimError(
                f"The claim lock on {conn.label} stayed taken for {lock_wait_s:g} s. A claim operation "
                f"is stuck there: find it with `fuser {folder}/claim.lock` on the host and stop it."
            )
        if answer.outcome is Outcome.CORRUPT:
            raise ClaimError(
                f"The claim file {folder}/claim.json on {conn.label} is not a claim. Check that no stack "
                "is deploying to the host, remove the file, and run the update again."
            )
        return answer


class _ClaimCall(Request[AnswerT], Generic[AnswerT]):
    program: ClassVar[Program] = CLAIM

    stack: Annotated[str, POSITIONAL]
    """The stack asking ("" to read)."""
    folder: Annotated[str, POSITIONAL]
    """The host's state folder (``~/`` is the host user's home folder)."""
    lock_wait_s: float = 15.0
    """How long to wait for the claim lock."""
    silence_s: float = 60.0
    """acquire: how long the host waits for a word from the update before letting go (the update
    says it is alive more often than that; a dead network does not close a session by itself)."""

    def run_limit_s(self) -> float:
        return self.limit_s or self.lock_wait_s + 30

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        return HostError(
            f"The GPU claim step {self.mode!s} failed on {conn.label} (exit {int(code)}): "
            f"{result.stderr.strip()[-400:] or 'no output'}. "
            f"Check that {self.folder} on the host is writable by this user and python3 runs."
        )


class _Answered(_ClaimCall[ClaimAnswer]):
    def answer(self, conn: Connection, result: CommandResult) -> ClaimAnswer:
        lines = result.stdout.strip().splitlines()
        return ClaimAnswer.from_line(conn, lines[-1] if lines else "", self.folder, self.lock_wait_s)


class Read(_Answered):
    """``read``: the claim, and whether an update runs."""

    mode: ClassVar[ClaimMode] = ClaimMode.READ


class Release(_Answered):
    """``release``: removes the claim if ``stack`` owns it."""

    mode: ClassVar[ClaimMode] = ClaimMode.RELEASE


class Check(_Answered):
    """``check``: whether ``stack`` still owns the claim."""

    mode: ClassVar[ClaimMode] = ClaimMode.CHECK


class RecordServer(_Answered):
    """``record-server``: notes ``stack``'s server in its claim (``server.sh`` runs this one at a
    launch, in the same run)."""

    mode: ClassVar[ClaimMode] = ClaimMode.RECORD_SERVER

    server_pid: int
    server_start_ticks: int


@dataclass(frozen=True)
class Held:
    """``acquire``'s answer, and the session that holds the update lock while it lives."""

    answer: ClaimAnswer
    session: Session


class Acquire(_ClaimCall[Held]):
    """``acquire``: takes the update lock and the claim, then holds the lock while its caller
    writes a line every few seconds."""

    mode: ClassVar[ClaimMode] = ClaimMode.ACQUIRE
    held: ClassVar[bool] = True

    takeover: bool = False
    project: str
    update_id: str

    def held_answer(self, conn: Connection, session: Session) -> Held:
        line = session.read_line(timeout_s=self.lock_wait_s + conn.connect_timeout_s + 30)
        return Held(ClaimAnswer.from_line(conn, line, self.folder, self.lock_wait_s), session)
