"""Running a release's own code in a child interpreter, as the flag tables and sglang_world's
recordings do: a bare environment, the unpacked release and its helpers named to the child, and the
child's JSON answer read back.

The child finds this checkout through its parent folder only to import the module that drives it,
then forgets that folder, so the release sees nothing of the project but the stand-in machinery.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ChildRun", "run_release_child"]

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
_BOOT = (
    "import importlib, sys; sys.path.insert(0, sys.argv[1]); child = importlib.import_module(sys.argv[2]); "
    "sys.path.remove(sys.argv[1]); sys.exit(child.main(sys.argv[3:]))"
)


@dataclass(frozen=True)
class ChildRun:
    """What the child answered, or why it did not."""

    result: dict[str, Any] | None
    """The child's answer (the JSON object it wrote); ``None`` when it timed out or died first."""
    failure: str = ""
    """Why there is no answer, one sentence; empty when there is one."""


def run_release_child(
    module: str,
    release_dir: Path,
    helpers: Sequence[Path],
    *,
    timeout_s: float,
    doing: str,
    env: Mapping[str, str] | None = None,
    asserts: bool = False,
) -> ChildRun:
    """Runs ``module``'s ``main([out, release_dir, *helpers])`` in a child interpreter and reads
    the JSON it writes to ``out``. ``doing`` names the work in the timeout's sentence (``building
    the parser``); ``env`` adds variables to the bare environment. ``asserts`` keeps the release's
    ``assert`` statements, as a server runs them (they are SGLang's refusals); without it the child
    runs optimized (``-O``)."""
    with tempfile.TemporaryDirectory(prefix="sglang-release-") as scratch:
        out = Path(scratch) / "result.json"
        # A bare environment: SGLANG_* variables change what a release's code decides, and HOME is
        # where imports write caches; neither should depend on who runs this.
        bare = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "LANG": "C.UTF-8"}
        optimized = [] if asserts else ["-O"]
        command = [sys.executable, "-S", "-E", *optimized, "-c", _BOOT, _PACKAGE_PARENT, module, str(out)]
        command += [str(release_dir), *map(str, helpers)]
        try:
            done = subprocess.run(
                command,
                env={**bare, **(env or {})},
                cwd=scratch,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return ChildRun(None, f"{doing} took over {timeout_s:g} s")
        if not out.exists():
            last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            return ChildRun(None, f"the child interpreter died: {last}")
        return ChildRun(json.loads(out.read_text(encoding="utf-8")))
