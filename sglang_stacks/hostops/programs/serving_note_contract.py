"""The contract of ``serving_note.sh``: the host's note of the server it serves (``serving.json``
beside the claim), written when the server becomes ready, so a preview of any stack can say flag
by flag how it differs from what runs there."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Field, ValidationError, model_validator

from sglang_stacks.config.flags import LaunchFlags
from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import ON_HOST, Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult
from sglang_stacks.shape import Shape

__all__ = [
    "SERVING_NOTE",
    "Forget",
    "ReadNote",
    "Record",
    "ServingNote",
    "ServingNoteExit",
    "ServingNoteMode",
]


class ServingNoteMode(StrEnum):
    """What ``serving_note.sh`` is asked to do."""

    RECORD = "record"
    FORGET = "forget"
    READ = "read"


class ServingNoteExit(ProgramExit):
    """How ``serving_note.sh`` ends."""

    OK = 0
    """Done; read printed the note (nothing when there is none)."""
    NOT_WRITTEN = 1, HostError
    """record: the note could not be written (its folder, a full disk); ``set -e`` stopped it
    before the old note was replaced."""
    UNKNOWN_MODE = 2, HostError
    """It was asked for a mode it does not know: this sglang-stacks and the program disagree."""


SERVING_NOTE = Program(file="serving_note.sh", exits=ServingNoteExit, error=HostError, modes=ServingNoteMode)
"""``serving_note.sh``."""


class ServingNote(Shape):
    """The server a host serves: its stack, process, release and launch flags, typed as launched."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    stack: str
    """The stack whose server it is."""
    pid: int
    """The server's process id on the host."""
    release: str
    """The SGLang release its flags were rendered for."""
    flags: LaunchFlags
    """Its launch flags."""
    launch_command: str = ""
    """The exact command line it was started with."""

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, note: Any) -> Any:
        # Notes of earlier versions: flags as rendered options (--flag -> words), no release.
        if not isinstance(note, dict):
            return note
        flags = note.get("flags")
        release = str(note.get("release") or "")
        if isinstance(flags, dict) and any(str(key).startswith("-") for key in flags) and release:
            from sglang_stacks.config.recorded import values_from_options  # old notes only

            note = {**note, "flags": values_from_options(flags, release)}
        return note


class _Note(Request[None]):
    program: ClassVar[Program] = SERVING_NOTE

    note: Annotated[str, ON_HOST]
    """The note's path."""

    def answer(self, conn: Connection, result: CommandResult) -> None:
        return None


class Record(_Note):
    """``record``: replaces the note with ``written`` (its standard input), in one rename."""

    mode: ClassVar[ServingNoteMode] = ServingNoteMode.RECORD

    written: ServingNote = Field(exclude=True)

    def stdin(self) -> bytes:
        return json.dumps(self.written.model_dump(mode="json"), sort_keys=True).encode()


class Forget(_Note):
    """``forget``: removes the note if it is about the server ``pid``."""

    mode: ClassVar[ServingNoteMode] = ServingNoteMode.FORGET

    pid: int


class ReadNote(Request[ServingNote | None]):
    """``read``: the note; None when there is none, or one this version cannot read."""

    program: ClassVar[Program] = SERVING_NOTE
    mode: ClassVar[ServingNoteMode] = ServingNoteMode.READ

    note: Annotated[str, ON_HOST]
    release: str = Field(default="", exclude=True)
    """The release of a note that names none (notes of earlier versions)."""

    def answer(self, conn: Connection, result: CommandResult) -> ServingNote | None:
        try:
            found = json.loads(result.stdout)
            if not isinstance(found, dict):
                return None
            return ServingNote.model_validate({"release": self.release, **found})
        except (json.JSONDecodeError, ValidationError):
            return None
