"""What one Pulumi command of the control-plane benchmark costs: its seconds, the SSH connections
(handshakes) and sessions (round trips) it opened at the host, and the CPU seconds of its process
tree; for an ``up`` that applies a changed flag, also the physical work in it (the old server's
stop, the new one's start and the benchmark), timed by the engine's own log."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpu_time import children_cpu_s

from tests._pulumi import Workspace
from tests.sshd import SshServer

__all__ = ["Timing", "command", "flag_change", "physical_work_s", "timed"]


def command(workspace: Workspace, *args: str) -> Callable[[], object]:
    """`pulumi <args>` in ``workspace``, to run later."""
    return lambda: workspace.run(*args)


Timing = tuple[float, int, int, float]
"""Seconds, SSH connections, SSH sessions and CPU seconds of one command."""


def timed(sshd: SshServer, action: Callable[[], object]) -> Timing:
    """Seconds ``action`` took, the SSH connections and sessions sshd started meanwhile, and the
    CPU seconds it used on this machine (the host's side of the emulator included)."""
    before, started, cpu = (sshd.connections(), sshd.sessions()), time.monotonic(), children_cpu_s()
    action()
    took = time.monotonic() - started
    return took, sshd.connections() - before[0], sshd.sessions() - before[1], children_cpu_s() - cpu


_WORK = {("Delete", "Server"), ("Create", "Server"), ("Create", "Benchmark")}


def physical_work_s(engine_log: str) -> float:
    """Seconds the providers spent stopping the old server, starting the new one and benchmarking
    it, from the engine's verbose log (each call's "executing" and "success" lines)."""
    began: dict[tuple[str, str], float] = {}
    total_s = 0.0
    for line in engine_log.splitlines():
        if not line.startswith("{") or '"Provider[' not in line:
            continue
        entry = json.loads(line)
        message: str = entry["msg"]
        call = message.split("].", 1)[1].split("(", 1)[0]
        kind = message.split("(", 1)[1].split(")", 1)[0].rsplit("::", 1)[0].rsplit(":", 1)[-1]
        if (call, kind) not in _WORK:
            continue
        when = _seconds(entry["time"])
        if "executing" in message:
            began[(call, kind)] = when
        elif "success" in message and (call, kind) in began:
            total_s += when - began.pop((call, kind))
    return total_s


def _seconds(stamp: str) -> float:
    clock = stamp.rstrip("Z").split("T")[1]  # the same day: a benchmark run is minutes long
    hours, minutes, seconds = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def flag_change(sshd: SshServer, project: Workspace, stack: str) -> tuple[Timing, float]:
    """The `up` that applies a changed flag, and the physical work in it (stop, start, benchmark)."""
    logs: list[str] = []
    # -v=7 logs each provider call; the log goes to a file, not the terminal, so it costs little.
    up = ("up", "--yes", "-s", stack, "-v=7", "--logflow", "--logtostderr")
    timing = timed(sshd, lambda: logs.append(project.run(*up).stderr))
    return timing, physical_work_s(logs[0])
