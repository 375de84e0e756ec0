"""Processes of this machine as the tests look at them."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
