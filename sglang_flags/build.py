"""Build one release's parser from its wheel, in a child interpreter, and judge the result.

The child (``_child.py``) imports the release's ``server_args`` with stand-ins for the packages
that are not there and describes the parser ``add_cli_args`` builds. A release is refused, with
the reasons, when a stand-in reached the parser or was asked anything while it was built, or
when the import failed: a table is only ever the release's own parser.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_flags.release_child import run_release_child
from sglang_flags.wheels import unpacked_helpers, unpacked_release

__all__ = ["Built", "build_from_folder", "build_from_wheel"]

_CHILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class Built:
    """The outcome for one release: its flags, or the reasons it was refused."""

    release: str
    """The release, as ``pip`` names it (``0.5.8.post1``)."""
    flags: list[dict[str, Any]] | None
    """The parser described as in a table; ``None`` when refused."""
    refused: list[str] = field(default_factory=list)
    """Why the parser cannot be trusted, one sentence each; empty when it can."""
    stand_in_modules: list[str] = field(default_factory=list)
    """Top-level packages that were stand-ins while the parser was built."""
    seconds: float = 0.0
    """Wall time: download (when not cached), unpack and build."""


def build_from_folder(release: str, release_dir: Path, helpers: list[Path]) -> Built:
    """Build the parser of the unpacked release in ``release_dir`` in a child interpreter."""
    run = run_release_child(
        "sglang_flags._child", release_dir, helpers, timeout_s=_CHILD_TIMEOUT_S, doing="building the parser"
    )
    if run.result is None:
        return Built(release, None, [run.failure])
    result = run.result
    refused = list(result.get("refused", []))
    flags = result.get("flags") if not refused else None
    return Built(release, flags, refused, list(result.get("stand_in_modules", [])))


def build_from_wheel(release: str, cache: Path) -> Built:
    """Download (unless cached) and unpack ``sglang==release``, then build its parser.

    Raises ``WheelError`` when the wheel cannot be had; a parser that cannot be trusted is a
    ``Built`` with reasons, not an exception.
    """
    started = time.monotonic()
    release_dir = unpacked_release(release, cache)
    built = build_from_folder(release, release_dir, unpacked_helpers(cache))
    return Built(
        built.release, built.flags, built.refused, built.stand_in_modules, time.monotonic() - started
    )
