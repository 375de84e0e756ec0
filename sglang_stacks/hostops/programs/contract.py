"""What a host program promises, declared once beside its file: ``server.sh``'s contract is
``server_contract.py``.

A contract names the program (`Program`: its file, its modes as an enum, its exit codes as a
`ProgramExit` enum, the error its undeclared failures raise) and holds one `Request` per mode: a
frozen pydantic model whose fields are the program's parameters, which parses what the program
prints into the mode's typed answer, in that one place. `sglang_stacks.hostops.programs.runner.call`
runs a request; tests/test_programs_contracts.py holds every program to its contract.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar

from pydantic import ConfigDict, Field

from sglang_stacks.config.docstrings import attribute_docstrings
from sglang_stacks.errors import Cause, ServerError, StacksError
from sglang_stacks.hostops.transport import CommandResult, HostPath, tail
from sglang_stacks.shape import Shape

if TYPE_CHECKING:
    from sglang_stacks.hostops.connection import Connection
    from sglang_stacks.hostops.session import Session

__all__ = ["FOLDER", "ON_HOST", "POSITIONAL", "Program", "ProgramExit", "Request", "raised_as", "source"]

FOLDER = Path(__file__).resolve().parent
"""The folder of the programs and their contracts."""

ON_HOST = "on-host"
"""Field metadata: the parameter is a path on the host, its leading ``~/`` expanded there."""
POSITIONAL = "positional"
"""Field metadata: a Python program takes the parameter as a positional argument, in field order
(the others are ``--options``)."""

AnswerT = TypeVar("AnswerT")


@functools.cache
def source(name: str) -> str:
    """The text of the program ``name`` (``claim.py``, ``server.sh``...)."""
    return (FOLDER / name).read_text()


def raised_as(kind: type[StacksError], message: str) -> StacksError:
    """The error of class ``kind`` for a host program's failure. A server's error says how the server
    ended; here its host program failed, not the server: ``host``."""
    return kind(message, cause=Cause.HOST) if issubclass(kind, ServerError) else kind(message)


class ProgramExit(IntEnum):
    """An exit code of a host program, each member documented with what it means. ``error`` is the
    class of `sglang_stacks.errors` that the code is raised as, or None for an answer (0, or a yes
    or no a program tells by its exit code)."""

    error: type[StacksError] | None

    def __new__(cls, code: int, error: type[StacksError] | None = None) -> Self:
        member = int.__new__(cls, code)
        member._value_ = code
        member.error = error
        return member

    @property
    def meaning(self) -> str:
        """The member's docstring: what the code means."""
        return attribute_docstrings(type(self)).get(self.name, self.name.lower().replace("_", " "))


@dataclass(frozen=True)
class Program:
    """A program of this folder, as its contract declares it."""

    file: str
    """Its file name: ``server.sh``, ``claim.py``..."""
    exits: type[ProgramExit]
    """Every exit code it may end with."""
    error: type[StacksError]
    """What an exit code that ``exits`` does not name is raised as."""
    modes: type[StrEnum] | None = None
    """What it can be asked to do (``MODE`` of a bash program, the first argument of a Python
    one); None for a program that does one thing."""
    companions: Mapping[str, str] = field(default_factory=dict)
    """Other programs of this folder it runs, shipped with it: variable -> file."""
    passes_on: tuple[type[IntEnum], ...] = ()
    """The exit codes of the programs it runs that it ends with, as they are (their own enums)."""

    @property
    def is_python(self) -> bool:
        """Whether it is a Python program (run by the host's system python3), not a bash one."""
        return self.file.endswith(".py")

    def exit_named(self, code: int) -> ProgramExit | None:
        """The declared member for an exit code, or None when the contract does not name it."""
        try:
            return self.exits(code)
        except ValueError:
            return None


class Request(Shape, Generic[AnswerT]):
    """One call of a host program: its parameters as fields (a bash program's upper-cased
    variables, a Python program's arguments) and the answer parsed from what it prints.

    A subclass sets ``program``, ``mode`` for a program with modes, and implements `answer`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    program: ClassVar[Program]
    mode: ClassVar[StrEnum | None] = None
    held: ClassVar[bool] = False
    """Whether the program keeps running after its first line, held by a session (`held_answer`)."""
    default_limit_s: ClassVar[float] = 30.0

    limit_s: float | None = Field(default=None, gt=0, exclude=True)
    """How long the program may run on the host; None for its mode's own limit."""

    def run_limit_s(self) -> float:
        """How long the program may run on the host."""
        return self.limit_s or self.default_limit_s

    def variables(self) -> dict[str, str]:
        """A bash program's variables: ``MODE``, each parameter upper-cased, each companion."""
        found = {"MODE": str(self.mode)} if self.mode is not None else {}
        for name, info in type(self).model_fields.items():
            if info.exclude:
                continue
            value = getattr(self, name)
            on_host = ON_HOST in info.metadata and bool(value)
            found[name.upper()] = HostPath(value) if on_host else _word(value)
        return found | {variable: source(file) for variable, file in self.program.companions.items()}

    def argv(self) -> list[str]:
        """A Python program's arguments: the mode, the positional parameters, then the others as
        ``--name value`` (a switch as ``--name`` when set; None left out)."""
        words = [str(self.mode)] if self.mode is not None else []
        options: list[str] = []
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if info.exclude or value is None or value is False:
                continue
            if POSITIONAL in info.metadata:
                words.append(_word(value))
            else:
                option = "--" + name.replace("_", "-")
                options += [option] if value is True else [option, _word(value)]
        return words + options

    def stdin(self) -> bytes | None:
        """What the program reads on its standard input."""
        return None

    def answer(self, conn: Connection, result: CommandResult) -> AnswerT:
        """The typed answer from what the program printed (its exit code declared an answer)."""
        raise NotImplementedError

    def held_answer(self, conn: Connection, session: Session) -> AnswerT:
        """The typed answer of a held program, from its session (`held`)."""
        raise NotImplementedError

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        """The error an exit code that means a failure is raised as; a contract words its own."""
        assert code.error is not None
        return raised_as(
            code.error,
            f"{self.doing()} on {conn.label} failed: {code.meaning} (exit {int(code)}; it said: "
            f"{tail(result.stderr or result.stdout)}).",
        )

    def doing(self) -> str:
        """The call as messages name it: ``The host program server.sh (stop)``."""
        mode = f" ({self.mode})" if self.mode is not None else ""
        return f"The host program {self.program.file}{mode}"


def _word(value: Any) -> str:
    """A parameter as one word of a variable or command line."""
    if isinstance(value, bool):
        return "1" if value else ""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple | list):
        return "\n".join(_word(item) for item in value)
    return str(value)
