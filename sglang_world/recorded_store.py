"""The recorded rows on disk: one file per distinct result, an index mapping releases to files.

Releases whose code resolves every grid point alike share one file, named after the oldest of
them. A row is the resolved values in ``ROW_FIELDS`` order (batch-size lists by their number in
the file's ``graph_sizes``), or the error the release raised, as text. The index holds each
file's sha256 and the grid's, so a file edited by hand or a changed grid is caught.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sglang_flags import release_key
from sglang_world.grid import GRID
from sglang_world.settings import ServerSettings

__all__ = [
    "COMPARED",
    "RECORDED",
    "ROW_FIELDS",
    "RecordedRow",
    "Recording",
    "captured_sizes",
    "grid_digest",
    "read_index",
    "recorded_releases",
    "recorded_rows",
    "row_compared",
    "settings_compared",
    "store_recordings",
]

RECORDED = Path(__file__).resolve().parent / "recorded"
INDEX = "index.json"
ROW_FIELDS = (
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "max_running_requests",
    "cuda_graph_max_bs",
    "cuda_graph_bs",
    "cuda_graph_disabled",
    "runtime_cuda_graph_bs",
)
_LISTS = ("cuda_graph_bs", "runtime_cuda_graph_bs")
_ABOUT = (
    "What each shipped SGLang release's own code resolves for memory at every point of "
    "sglang_world.grid.GRID (releases with identical results share a file), each file's sha256, and "
    "releases that could not be recorded. Written by python -m sglang_world.record; do not edit by hand."
)


COMPARED = tuple(name for name in ROW_FIELDS if name not in ("cuda_graph_disabled", "runtime_cuda_graph_bs"))
"""What the project's rules are checked on against a recorded row."""


def settings_compared(settings: ServerSettings) -> dict[str, Any]:
    """``settings`` as they are compared with a recorded row (``COMPARED``)."""
    return {
        key: list(settings.cuda_graph_bs) if key == "cuda_graph_bs" else getattr(settings, key)
        for key in COMPARED
    }


def captured_sizes(values: dict[str, Any]) -> list[int]:
    """The decode batch sizes a row (or a release's resolved settings) captures: the runtime's where
    the release left them to its graph runner (0.5.1, 0.5.2); none when graphs are off."""
    sizes = (
        values["cuda_graph_bs"] if values["cuda_graph_bs"] is not None else values["runtime_cuda_graph_bs"]
    )
    return list(sizes or [])


def row_compared(values: dict[str, Any]) -> dict[str, Any]:
    """A recorded row's values as they are compared with settings (``COMPARED``)."""
    return {key: values[key] for key in COMPARED} | {"cuda_graph_bs": captured_sizes(values)}


@dataclass(frozen=True)
class Recording:
    """One release's rows, or why it has none."""

    release: str
    rows: list[dict[str, Any]] | None
    """One per grid point: what the release resolved, or the error it raised."""
    refused: list[str] = field(default_factory=list)
    stand_in_modules: list[str] = field(default_factory=list)
    stand_in_questions_at: list[str] = field(default_factory=list)
    """Where the release asked a stand-in something while resolving (``file:line``)."""
    seconds: float = 0.0


@dataclass(frozen=True)
class RecordedRow:
    """What one release resolved at one grid point, or the error it raised."""

    values: dict[str, Any] | None
    """``ROW_FIELDS`` to values; None when the release raised ``error``."""
    error: str | None = None


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def grid_digest() -> str:
    """The digest of the grid's points, in order: rows recorded for another grid do not count."""
    return _digest(json.dumps([p.as_dict() for p in GRID], sort_keys=True).encode())


def _encode(rows: list[dict[str, Any]]) -> dict[str, Any]:
    lists: dict[tuple[int, ...], int] = {}
    encoded: list[Any] = []
    for row in rows:
        if "error" in row:
            encoded.append(str(row["error"]))
            continue
        values = []
        for name in ROW_FIELDS:
            value = row.get(name)
            if name in _LISTS and value is not None:
                value = lists.setdefault(tuple(value), len(lists))
            values.append(value)
        encoded.append(values)
    return {"graph_sizes": [list(sizes) for sizes in lists], "rows": encoded}


def _file_text(releases: list[str], rows: list[dict[str, Any]]) -> str:
    document = {"releases": releases, "grid": grid_digest(), **_encode(rows)}
    lines = [json.dumps(row, separators=(",", ":")) for row in document.pop("rows")]
    head = json.dumps(document, separators=(",", ":"))[:-1]
    return head + ',"rows":[\n' + ",\n".join(lines) + "\n]}\n"


def read_index(recorded: Path = RECORDED) -> dict[str, Any]:
    """The index in ``recorded``, or an empty one."""
    path = recorded / INDEX
    if not path.exists():
        return {"releases": {}, "files": {}, "refused": {}, "stand_ins": {}}
    index: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return index


def store_recordings(recordings: Iterable[Recording], recorded: Path = RECORDED) -> None:
    """Add ``recordings`` to the files and index in ``recorded``, regrouping shared files."""
    recorded.mkdir(parents=True, exist_ok=True)
    index = read_index(recorded)
    everything = {r: recorded_rows_raw(r, recorded) for r in index["releases"]}
    for recording in recordings:
        if recording.rows is None:
            everything.pop(recording.release, None)
            index["refused"][recording.release] = recording.refused
            continue
        index["refused"].pop(recording.release, None)
        everything[recording.release] = recording.rows
        index["stand_ins"][recording.release] = {
            "modules": recording.stand_in_modules,
            "questions_at": recording.stand_in_questions_at,
        }
    groups: dict[str, list[str]] = {}
    for release in sorted(everything, key=release_key):
        key = json.dumps(everything[release], sort_keys=True)
        groups.setdefault(key, []).append(release)
    for old in recorded.glob("*.json"):
        if old.name != INDEX:
            old.unlink()
    index.update(releases={}, files={}, about=_ABOUT, grid=grid_digest())
    for releases in groups.values():
        name = f"{releases[0]}.json"
        text = _file_text(releases, everything[releases[0]])
        (recorded / name).write_text(text, encoding="utf-8")
        index["files"][name] = _digest(text.encode())
        index["releases"].update(dict.fromkeys(releases, name))
    index["releases"] = {r: index["releases"][r] for r in sorted(index["releases"], key=release_key)}
    (recorded / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _load.cache_clear()


@cache
def _load(name: str, recorded: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((recorded / name).read_text(encoding="utf-8"))
    return document


def recorded_rows_raw(release: str, recorded: Path = RECORDED) -> list[dict[str, Any]]:
    """The rows of ``release`` as the child wrote them (values by name, or ``error``)."""
    document = _load(read_index(recorded)["releases"][release], recorded)
    sizes = document["graph_sizes"]
    rows: list[dict[str, Any]] = []
    for row in document["rows"]:
        if isinstance(row, str):
            rows.append({"error": row})
            continue
        values = dict(zip(ROW_FIELDS, row, strict=True))
        for name in _LISTS:
            if values[name] is not None:
                values[name] = sizes[values[name]]
        rows.append(values)
    return rows


def recorded_rows(release: str, recorded: Path = RECORDED) -> list[RecordedRow]:
    """What ``release``'s code resolved at each grid point (KeyError when it was not recorded)."""
    return [
        RecordedRow(None, row["error"]) if "error" in row else RecordedRow(row)
        for row in recorded_rows_raw(release, recorded)
    ]


def recorded_releases(recorded: Path = RECORDED) -> list[str]:
    """Releases with recorded rows, oldest first."""
    return sorted(read_index(recorded)["releases"], key=release_key)
