"""What the host serves right now: a note the server writes beside the claim when it is ready, so a
preview of any stack can say, flag by flag, how it differs from the server running on the host.
The note's shape, `ServingNote`, is the answer of ``programs/serving_note.sh``'s contract.
"""

from __future__ import annotations

from typing import Any

from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.runner import call
from sglang_stacks.hostops.programs.serving_note_contract import (
    Forget,
    ReadNote,
    Record,
    ServingNote,
)

__all__ = ["NOTE", "ServingNote", "describe", "flag_changes", "forget", "read", "record", "serves"]

NOTE = "serving.json"


def _note(state_dir: str) -> str:
    return f"{state_dir.rstrip('/')}/{NOTE}"


def record(conn: Connection, state_dir: str, note: ServingNote) -> None:
    """Writes the note of the server that just became ready (replacing any earlier one)."""
    call(conn, Record(note=_note(state_dir), written=note))


def forget(conn: Connection, state_dir: str, pid: int) -> None:
    """Removes the note if it is about the server with this pid."""
    call(conn, Forget(note=_note(state_dir), pid=pid))


def read(conn: Connection, state_dir: str, release: str) -> ServingNote | None:
    """The note of the server the host serves (``release`` for a note that names none), or None
    when there is none, or one this version cannot read."""
    return call(conn, ReadNote(note=_note(state_dir), release=release))


def serves(conn: Connection, state_dir: str, stack: str, pid: int) -> bool:
    """Whether the note says the host serves ``stack`` with the server ``pid``: that server became
    ready, and no stop or refresh has seen it end since."""
    note = read(conn, state_dir, release="")
    return note is not None and (note.stack, note.pid) == (stack, pid)


def flag_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per flag that differs between two `config.render.shown_flags` maps: `~` changed,
    `+` added, `-` removed."""
    from sglang_stacks.config.render import show_value

    lines = []
    for option in sorted(set(old) | set(new)):
        if option not in old:
            lines.append(f"+ {option} {show_value(new[option])}")
        elif option not in new:
            lines.append(f"- {option} {show_value(old[option])}")
        elif old[option] != new[option]:
            lines.append(f"~ {option} {show_value(old[option])} => {show_value(new[option])}")
    return lines


def changes_from(current: ServingNote, flags: ServerFlags, release: str) -> list[str]:
    """How ``flags`` for ``release`` differ from what the host serves, each flag shown as its own
    release spells it."""
    from sglang_stacks.config.render import shown_flags

    return flag_changes(shown_flags(current.flags, current.release), shown_flags(flags, release))


def describe(current: ServingNote | None, stack: str, flags: ServerFlags, release: str, label: str) -> str:
    """A sentence for the preview: what deploying `stack` changes on the host."""
    # Only a label that is words ("the local host") starts the sentence capitalised: an SSH
    # user's name is spelled as the host knows it.
    if label.startswith("the "):
        label = "T" + label[1:]
    if current is None:
        return f"{label} serves no SGLang server of sglang-stacks now; {stack} would start one."
    owner = current.stack
    changes = changes_from(current, flags, release)
    if not changes:
        return f"{label} serves {owner} with the same launch flags as {stack}."
    listed = "\n".join(f"    {line}" for line in changes)
    verb = "now serves" if owner != stack else "serves"
    return f"{label} {verb} {owner}; deploying {stack} changes its launch flags:\n{listed}"
