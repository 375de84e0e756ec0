"""GPU memory bookkeeping shared by running emulated servers and the ``nvidia-smi`` shim.

Each server writes ``<state dir>/<pid>.json`` with what it holds on which GPU, rewrites it as
startup allocates memory, and removes it on exit. Readers ignore files whose process is gone
(a killed server cannot clean up), so ``nvidia-smi`` never shows a dead server's memory.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GpuProcess", "StateDir", "state_dir"]


@dataclass(frozen=True)
class GpuProcess:
    """One live emulated server's hold on the GPUs."""

    pid: int
    process_name: str
    memory_mib_by_gpu: dict[int, int]
    port: int


def state_dir() -> StateDir:
    """``$SGLANG_EMULATOR_STATE_DIR`` or ``~/.sglang-emulator``."""
    configured = os.environ.get("SGLANG_EMULATOR_STATE_DIR")
    return StateDir(Path(configured).expanduser() if configured else Path.home() / ".sglang-emulator")


def _start_ticks(pid: int) -> str | None:
    # The start time tells a live server from an unrelated process that reused its pid.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, start_ticks: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start_ticks is None:
        return True
    current = _start_ticks(pid)
    return current is None or current == start_ticks


@dataclass(frozen=True)
class StateDir:
    """The folder of per-process records."""

    path: Path

    def record(self, process_name: str, memory_mib_by_gpu: dict[int, int], port: int) -> None:
        """Write (or rewrite) this process's record atomically."""
        self.path.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        body = {
            "pid": pid,
            "start_ticks": _start_ticks(pid),
            "process_name": process_name,
            "memory_mib_by_gpu": {str(k): v for k, v in memory_mib_by_gpu.items()},
            "port": port,
        }
        tmp = self.path / f".{pid}.json.tmp"
        tmp.write_text(json.dumps(body))
        tmp.replace(self.path / f"{pid}.json")

    def remove(self) -> None:
        """Drop this process's record (on exit)."""
        with contextlib.suppress(FileNotFoundError):
            (self.path / f"{os.getpid()}.json").unlink()

    def live_processes(self) -> list[GpuProcess]:
        """Records of servers still running, by pid; stale records are ignored."""
        if not self.path.is_dir():
            return []
        found = []
        for file in sorted(self.path.glob("*.json")):
            try:
                body = json.loads(file.read_text())
                pid = int(body["pid"])
                process = GpuProcess(
                    pid=pid,
                    process_name=str(body["process_name"]),
                    memory_mib_by_gpu={int(k): int(v) for k, v in body["memory_mib_by_gpu"].items()},
                    port=int(body["port"]),
                )
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if _alive(pid, body.get("start_ticks")):
                found.append(process)
        return sorted(found, key=lambda p: p.pid)

    def used_mib(self, gpu: int, exclude_pid: int | None = None) -> int:
        """Memory the live servers hold on ``gpu``."""
        return sum(p.memory_mib_by_gpu.get(gpu, 0) for p in self.live_processes() if p.pid != exclude_pid)
