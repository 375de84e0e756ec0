"""Runs the host programs of ``sglang_stacks/hostops/programs`` on this machine, as the host does:
bash programs with their parameters as upper-case variables, Python ones with their arguments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sglang_stacks.hostops.programs.contract import FOLDER


def run_sh(name: str, stdin: str = "", **params: str) -> subprocess.CompletedProcess[str]:
    """``bash <name>`` with ``params`` as its variables."""
    env = {**os.environ, **{key.upper(): value for key, value in params.items()}}
    return subprocess.run(
        ["bash", str(FOLDER / name)], input=stdin, env=env, capture_output=True, text=True, timeout=120
    )


def run_py(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``python -I -S <name> args``, isolated as the host's system python3 runs it."""
    return subprocess.run(
        [sys.executable, "-I", "-S", str(FOLDER / name), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def unreadable_file(path: Path) -> None:
    """A file at ``path`` whose read fails for every user, root included (the suite runs as root,
    which reads a file of mode 0): a link to ``/proc/self/mem``, a regular file whose first page no
    process has mapped, so reading it fails with EIO."""
    path.symlink_to("/proc/self/mem")
