"""Record what each release's own code resolves for memory, over the grid, from its wheel.

    python -m sglang_world.record 0.5.8 0.5.23     # those releases (wheels downloaded with pip, cached)
    python -m sglang_world.record --all            # every release with a flag table
    python -m sglang_world.record 0.5.8 --output - # print one release's rows, write nothing

A child interpreter (``_record_child.py``) runs the release's parser and ``ServerArgs`` resolution
at every grid point with a stand-in GPU and stand-in models; the rows are written to
``recorded/`` (``recorded_store.py``). Nothing here reads or retypes the release's rules: the
project's rules (``settings.py``) are checked against these rows by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path

from sglang_flags import known_releases, release_key
from sglang_flags.release_child import run_release_child
from sglang_flags.wheels import WheelError, default_cache, unpacked_helpers, unpacked_release
from sglang_world.recorded_store import RECORDED, Recording, store_recordings

__all__ = ["Recording", "main", "record_release"]

_CHILD_TIMEOUT_S = 3600


def _short(text: str, folders: list[str]) -> str:
    """``text`` with this machine's folders left out: the release's, the helpers', the stdlib's."""
    for folder in folders:
        text = text.replace(os.path.join(folder, ""), "")
    return text.replace(os.path.join(sysconfig.get_paths()["stdlib"], ""), "<stdlib>/")


def record_release(release: str, cache: Path, points: Sequence[int] | None = None) -> Recording:
    """Resolve the grid (or the points numbered ``points``) with ``release``'s own code, its wheel
    downloaded unless cached."""
    started = time.monotonic()
    release_dir = unpacked_release(release, cache)
    helpers = unpacked_helpers(cache)
    # The child's environment is bare (SGLANG_* variables change what a release resolves) but for
    # the points asked for.
    run = run_release_child(
        "sglang_world._record_child",
        release_dir,
        helpers,
        timeout_s=_CHILD_TIMEOUT_S,
        doing="resolving the grid",
        env={} if points is None else {"SGLANG_WORLD_RECORD_POINTS": ",".join(map(str, points))},
    )
    if run.result is None:
        return Recording(release, None, [run.failure])
    result = run.result
    folders = [str(release_dir), *map(str, helpers)]
    if result.get("refused"):
        return Recording(release, None, [_short(r, folders) for r in result["refused"]])
    return Recording(
        release,
        result["rows"],
        stand_in_modules=result["stand_in_modules"],
        stand_in_questions_at=[_short(q, folders) for q in result["stand_in_questions_at"]],
        seconds=time.monotonic() - started,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_world.record",
        description="Record each release's own memory settings over the grid, from its wheel.",
    )
    parser.add_argument("releases", nargs="*", help="releases to record, e.g. 0.5.8")
    parser.add_argument("--all", action="store_true", help="every release with a flag table")
    parser.add_argument("--cache", type=Path, default=None, help="wheel cache")
    parser.add_argument("--output", help="print (-) one release's rows instead of storing them")
    parser.add_argument("--recorded", type=Path, default=RECORDED, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when every release was recorded, 1 when some were refused, 2 on errors."""
    args = _parser().parse_args(argv)
    releases = known_releases() if args.all else sorted(set(args.releases), key=release_key)
    if not releases:
        _parser().error("name releases to record, or --all")
    if args.output is not None and len(releases) != 1:
        _parser().error("--output takes exactly one release")
    cache = args.cache or default_cache()
    recordings = []
    for release in releases:
        try:
            recording = record_release(release, cache)
        except WheelError as error:
            print(f"error: SGLang {release}: {error}", file=sys.stderr)
            return 2
        state = f"{len(recording.rows)} points" if recording.rows is not None else "refused"
        print(f"SGLang {release}: {state} in {recording.seconds:.0f} s", file=sys.stderr)
        for reason in recording.refused:
            print(f"  - {reason}", file=sys.stderr)
        recordings.append(recording)
    if args.output is not None:
        json.dump(recordings[0].rows, sys.stdout)
        return 0 if recordings[0].rows is not None else 1
    store_recordings(recordings, args.recorded)
    return 1 if any(r.rows is None for r in recordings) else 0


if __name__ == "__main__":
    sys.exit(main())
