"""The contract of ``bound.py``: a command run on the host for as long as the session that started
it lives, one at a time (the benchmark's load generator runs under it). Its exit code is the
command's, except for its own below."""

from __future__ import annotations

from typing import ClassVar

from sglang_stacks.errors import BenchmarkError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult

__all__ = ["BOUND", "Bound", "BoundExit"]


class BoundExit(ProgramExit):
    """``bound.py``'s own exit codes; any other is the command's."""

    DONE = 0
    """The command ended by itself, successfully."""
    USAGE = 2, BenchmarkError
    """Its command line is not ``RUNFILE LABEL -- COMMAND [ARG...]``."""
    HUNG_UP = 129, BenchmarkError
    """A HUP stopped it (and the command with it): 128 and the signal's number."""
    TERMINATED = 143, BenchmarkError
    """A TERM stopped it (and the command with it), from the host's ``timeout`` or a person."""
    SESSION_GONE = 255, BenchmarkError
    """The session that started it ended, so it stopped the command."""


BOUND = Program(file="bound.py", exits=BoundExit, error=BenchmarkError)
"""``bound.py``."""


class Bound(Request[CommandResult]):
    """Runs ``command`` bound to the session; the answer is the command's own output."""

    program: ClassVar[Program] = BOUND

    runfile: str
    """Where the running command is recorded (``~/`` is the host user's home folder)."""
    label: str
    """Names the command in the message of a later run that stops it."""
    command: tuple[str, ...]

    def argv(self) -> list[str]:
        return [self.runfile, self.label, "--", *self.command]

    def answer(self, conn: Connection, result: CommandResult) -> CommandResult:
        return result
