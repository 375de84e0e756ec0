"""Record each release's scheduling numbers from its wheel, by running its own code.

    python -m sglang_world.record_scheduling 0.5.8 0.5.23   # those releases
    python -m sglang_world.record_scheduling --all          # every release with a flag table

The wheel is downloaded (``pip download --no-deps``) and unpacked into the flag tables' cache
(``sglang_flags.wheels``); a child interpreter (``_scheduling_child.py``) imports the release's
modules with stand-ins for the packages that are not there and reads the numbers its code computes.
A release whose numbers cannot be read is reported with the reasons and keeps no entry. The result
is merged into ``scheduling.json``; do not edit that file by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_flags import known_releases, release_key
from sglang_flags.release_child import run_release_child
from sglang_flags.wheels import WheelError, default_cache, unpacked_helpers, unpacked_release

__all__ = ["Recorded", "main", "record_from_folder", "record_from_wheel"]

TABLE = Path(__file__).resolve().parent / "scheduling.json"
_CHILD_TIMEOUT_S = 600
_ABOUT = (
    "Each SGLang release's scheduling numbers (new_token_ratio start, floor and decay; retraction "
    "steps; the clip of max new tokens), as its own code computes them with no SGLANG_* variable "
    "set, where that code keeps each, and which variables it lets override them. Written by "
    "python -m sglang_world.record_scheduling; do not edit by hand."
)


@dataclass(frozen=True)
class Recorded:
    """One release's numbers, or the reasons they could not be read."""

    release: str
    values: dict[str, Any] = field(default_factory=dict)
    homes: dict[str, str] = field(default_factory=dict)
    """Where the release keeps each number (module and expression, or file and name)."""
    variables: dict[str, str] = field(default_factory=dict)
    """The SGLANG_* variable that overrides each number, for the numbers the release lets one override."""
    refused: list[str] = field(default_factory=list)


def record_from_folder(release: str, release_dir: Path, helpers: list[Path]) -> Recorded:
    """Read the numbers of the unpacked release in ``release_dir`` in a child interpreter."""
    # SGLANG_* variables would change the numbers being recorded: the child's environment is bare.
    run = run_release_child(
        "sglang_world._scheduling_child",
        release_dir,
        helpers,
        timeout_s=_CHILD_TIMEOUT_S,
        doing="reading the numbers",
    )
    if run.result is None:
        return Recorded(release, refused=[run.failure])
    result = run.result
    refused = list(result.get("refused", []))
    if refused:
        return Recorded(release, refused=refused)
    return Recorded(release, dict(result["values"]), dict(result["homes"]), dict(result["variables"]))


def record_from_wheel(release: str, cache: Path) -> Recorded:
    """Download (unless cached) and unpack ``sglang==release``, then read its numbers."""
    return record_from_folder(release, unpacked_release(release, cache), unpacked_helpers(cache))


def _store(recorded: list[Recorded], table: Path) -> None:
    current = json.loads(table.read_text(encoding="utf-8")) if table.exists() else {"releases": {}}
    releases: dict[str, Any] = dict(current.get("releases", {}))
    for entry in recorded:
        if entry.refused:
            releases.pop(entry.release, None)
        else:
            releases[entry.release] = {
                "values": entry.values,
                "homes": entry.homes,
                "variables": entry.variables,
            }
    ordered = {release: releases[release] for release in sorted(releases, key=release_key)}
    table.write_text(json.dumps({"about": _ABOUT, "releases": ordered}, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Record the named releases; exit 0 when all were read, 1 when some were refused, 2 on errors."""
    parser = argparse.ArgumentParser(prog="python -m sglang_world.record_scheduling", description=__doc__)
    parser.add_argument("releases", nargs="*", help="releases to record from their wheels, e.g. 0.5.8")
    # --all as sglang_world.record has it; --shipped, its earlier name, still accepted.
    parser.add_argument(
        "--all", "--shipped", dest="all", action="store_true", help="every release with a flag table"
    )
    parser.add_argument("--cache", type=Path, default=None, help="wheel cache (default: the flag tables')")
    parser.add_argument("--table", type=Path, default=TABLE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    releases = sorted(set(args.releases) | (set(known_releases()) if args.all else set()), key=release_key)
    if not releases:
        parser.error("name releases, or --all for every release with a flag table")
    cache = args.cache or default_cache()
    recorded = []
    for release in releases:
        try:
            entry = record_from_wheel(release, cache)
        except WheelError as error:
            print(f"error: SGLang {release}: {error}", file=sys.stderr)
            return 2
        recorded.append(entry)
        if entry.refused:
            print(f"SGLang {release}: refused, no entry written:", file=sys.stderr)
            for reason in entry.refused:
                print(f"  - {reason}", file=sys.stderr)
        else:
            print(f"SGLang {release}: {json.dumps(entry.values)}", file=sys.stderr)
    _store(recorded, args.table)
    return 1 if any(entry.refused for entry in recorded) else 0


if __name__ == "__main__":
    sys.exit(main())
