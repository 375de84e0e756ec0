"""What the host serves right now: a note the server writes beside the claim when it is ready, so a
preview of any stack can say, flag by flag, how it differs from the server running on the host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs import run_bash
from sglang_stacks.hostops.transport import HostPath

NOTE = "serving.json"


def _note(state_dir: str) -> HostPath:
    return HostPath(f"{state_dir.rstrip('/')}/{NOTE}")


def record(conn: Connection, state_dir: str, note: Mapping[str, Any]) -> None:
    """Writes the note of the server that just became ready (replacing any earlier one)."""
    run_bash(
        conn,
        "serving_note.sh",
        {"op": "record", "note": _note(state_dir)},
        timeout_s=30,
        stdin=json.dumps(dict(note), sort_keys=True).encode(),
    )


def forget(conn: Connection, state_dir: str, pid: int) -> None:
    """Removes the note if it is about the server with this pid."""
    run_bash(
        conn, "serving_note.sh", {"op": "forget", "note": _note(state_dir), "pid": int(pid)}, timeout_s=30
    )


def read(conn: Connection, state_dir: str) -> dict[str, Any] | None:
    """The note of the server the host serves, or None when there is none."""
    result = run_bash(conn, "serving_note.sh", {"op": "read", "note": _note(state_dir)}, timeout_s=30)
    try:
        note = json.loads(result.stdout)
    except json.JSONDecodeError:
        return None
    return note if isinstance(note, dict) else None


def _shown(value: Any) -> str:
    if value is True:
        return "(set)"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def flag_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """One line per flag that differs: `~` changed, `+` added, `-` removed."""
    lines = []
    for option in sorted(set(old) | set(new)):
        if option not in old:
            lines.append(f"+ {option} {_shown(new[option])}")
        elif option not in new:
            lines.append(f"- {option} {_shown(old[option])}")
        elif old[option] != new[option]:
            lines.append(f"~ {option} {_shown(old[option])} => {_shown(new[option])}")
    return lines


def describe(current: Mapping[str, Any] | None, stack: str, flags: Mapping[str, Any], label: str) -> str:
    """A sentence for the preview: what deploying `stack` changes on the host."""
    # Only a label that is words ("the local host") starts the sentence capitalised: an SSH
    # user's name is spelled as the host knows it.
    if label.startswith("the "):
        label = "T" + label[1:]
    if current is None:
        return f"{label} serves no SGLang server of sglang-stacks now; {stack} would start one."
    owner = current.get("stack", "?")
    changes = flag_changes(current.get("flags", {}), flags)
    if not changes:
        return f"{label} serves {owner} with the same launch flags as {stack}."
    listed = "\n".join(f"    {line}" for line in changes)
    verb = "now serves" if owner != stack else "serves"
    return f"{label} {verb} {owner}; deploying {stack} changes its launch flags:\n{listed}"
