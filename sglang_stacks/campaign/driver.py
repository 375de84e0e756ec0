"""The ``sweep run`` process that runs a campaign's trials (its driver), as the study records it:
which machine it runs on, its process, and the project whose Pulumi backend holds its trial stacks.
Another driver judges whether it is still alive by its process when both run on one machine, else
by its heartbeat in the study; and it settles a dead driver's stacks only when they are in its own
backend (the same machine and project).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import ConfigDict

from sglang_stacks.shape import Shape

__all__ = ["Driver"]


class Driver(Shape):
    """The ``sweep run`` process that runs a trial: on another machine it is alive while its
    heartbeat is; on this one, while its process is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    machine: str
    pid: int
    start_ticks: int | None = None
    """The process's start time (``/proc/<pid>/stat``), so a reused pid is not taken for it."""
    project: str | None = None
    """The project folder it runs in, whose Pulumi backend holds its trial stacks (None: written
    by an earlier version, which settled every dead driver of its machine as its own)."""

    @classmethod
    def this(cls, project: Path | None = None) -> Driver:
        """This process, running in ``project``."""
        return cls(
            machine=socket.gethostname(),
            pid=os.getpid(),
            start_ticks=_start_ticks(os.getpid()),
            project=str(project.resolve()) if project is not None else None,
        )

    def alive_here(self) -> bool | None:
        """Whether the driver still runs, when it ran on this machine; None for another machine."""
        if self.machine != socket.gethostname():
            return None
        if self.start_ticks is None:  # no /proc where it ran: its pid alone says it
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        return _start_ticks(self.pid) == self.start_ticks

    def shares_backend(self, other: Driver) -> bool:
        """Whether its trial stacks are in ``other``'s Pulumi backend (one machine, one project),
        so that ``other`` can settle them once it is gone."""
        same_project = self.project is None or other.project is None or self.project == other.project
        return self.machine == other.machine and same_project


def _start_ticks(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot; None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])
