"""The CPU seconds the benchmarks count: another process's (from /proc), this process's own, and
those of this process's ended children."""

from __future__ import annotations

import os
import resource
from pathlib import Path

__all__ = ["children_cpu_s", "own_cpu_s", "process_cpu_s"]

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15


def own_cpu_s() -> float:
    """User plus system CPU seconds of this process (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu_s() -> float:
    """CPU seconds (user and system) of this process's ended children and their descendants: on a
    machine shared with other work, a command's CPU time varies far less than its duration."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime
