"""Writing the shipped tables: one file per distinct parser, and the index that maps releases to them.

Releases whose parsers are identical share one file, named after the oldest of them. The index
records each file's sha256, so ``index_problems`` catches a table edited or added by hand
without regenerating the index.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglang_flags import release_key

__all__ = ["TABLES", "index_problems", "read_index", "store_tables"]

TABLES = Path(__file__).resolve().parent / "tables"
INDEX = "index.json"

_ABOUT = (
    "Every shipped SGLang release and its flag table (releases with identical parsers share a "
    "file), each file's sha256, and the releases whose parser could not be built faithfully. "
    "Written by python -m sglang_flags.regenerate; do not edit by hand."
)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _table_text(release: str, flags: list[dict[str, Any]]) -> str:
    table = {
        "sglang_version": release,
        "source": (
            f"argparse parser built by sglang.srt.server_args.ServerArgs.add_cli_args of the "
            f"sglang=={release} wheel"
        ),
        "flags": flags,
    }
    return json.dumps(table, indent=1) + "\n"


def read_index(tables: Path = TABLES) -> dict[str, Any]:
    """The index in ``tables``, or an empty one when there is none yet."""
    path = tables / INDEX
    if not path.exists():
        return {"releases": {}, "tables": {}, "refused": {}}
    index: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return index


def _shipped_flags(tables: Path, index: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    cache: dict[str, list[dict[str, Any]]] = {}
    for file_name in set(index["releases"].values()):
        cache[file_name] = json.loads((tables / file_name).read_text(encoding="utf-8"))["flags"]
    return {release: cache[file_name] for release, file_name in index["releases"].items()}


def store_tables(
    built: Mapping[str, list[dict[str, Any]]],
    refused: Mapping[str, list[str]],
    tables: Path = TABLES,
) -> dict[str, str]:
    """Merge new tables and refusals into ``tables`` and rewrite the files and the index.

    A release in ``built`` gets that table; one in ``refused`` loses any table it had and is
    listed with its reasons. Returns the release -> file mapping now shipped.
    """
    index = read_index(tables)
    flags_by_release = _shipped_flags(tables, index)
    flags_by_release.update(built)
    for release in refused:
        flags_by_release.pop(release, None)
    refusals = {r: v for r, v in index.get("refused", {}).items() if r not in built}
    refusals.update(refused)
    files: dict[str, str] = {}  # table text -> file name (the oldest release that has it)
    releases: dict[str, str] = {}
    for release in sorted(flags_by_release, key=release_key):
        text = _table_text(release, flags_by_release[release])
        body = json.dumps(flags_by_release[release])
        releases[release] = files.setdefault(body, f"{release}.json")
        if releases[release] == f"{release}.json":
            (tables / f"{release}.json").write_text(text, encoding="utf-8")
    for stale in tables.glob("*.json"):
        if stale.name != INDEX and stale.name not in releases.values():
            stale.unlink()
    digests = {name: _digest((tables / name).read_bytes()) for name in sorted(set(releases.values()))}
    new_index = {
        "about": _ABOUT,
        "releases": releases,
        "tables": dict(sorted(digests.items(), key=lambda item: release_key(item[0].removesuffix(".json")))),
        "refused": dict(sorted(refusals.items(), key=lambda item: release_key(item[0]))),
    }
    (tables / INDEX).write_text(json.dumps(new_index, indent=1) + "\n", encoding="utf-8")
    return releases


def index_problems(tables: Path = TABLES) -> list[str]:
    """Every way the table files and the index disagree, as sentences; empty when they agree."""
    index = read_index(tables)
    problems: list[str] = []
    listed = index.get("tables", {})
    on_disk = {p.name for p in tables.glob("*.json") if p.name != INDEX}
    for name in sorted(on_disk - set(listed)):
        problems.append(f"{name} is not in {INDEX}; regenerate the tables instead of adding one by hand.")
    for name, digest in sorted(listed.items()):
        if name not in on_disk:
            problems.append(f"{INDEX} lists {name}, which is missing.")
        elif _digest((tables / name).read_bytes()) != digest:
            problems.append(f"{name} changed since {INDEX} was written; regenerate it, do not edit it.")
    for release, name in sorted(index.get("releases", {}).items()):
        if name not in listed:
            problems.append(f"release {release} maps to {name}, which {INDEX} does not list.")
    return problems
