"""The contract of ``probe.sh``: the GPU probe, three ``nvidia-smi`` queries in one round trip
(the GPUs, the compute processes, the topology), each printed as a marked step with its own exit
code, so a failing step still lets the others show."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult

__all__ = ["NOT_INSTALLED", "PROBE", "STEPS", "Probe", "ProbeExit", "Step", "Steps"]

STEPS = ("query-gpu", "compute-apps", "topo")
"""The steps ``probe.sh`` prints, in order."""
NOT_INSTALLED = 127
"""A step's exit code when ``nvidia-smi`` is not there (bash's own for a command not found)."""
_STEP_LINE = re.compile(r"^@@sglang-stacks (begin|end) (\S+)(?: (\d+))?$")


class ProbeExit(ProgramExit):
    """How ``probe.sh`` ends; each step's own exit code is in its answer."""

    OK = 0
    """It printed every step that ran."""


PROBE = Program(file="probe.sh", exits=ProbeExit, error=HostError)
"""``probe.sh``."""


@dataclass(frozen=True)
class Step:
    """One query's exit code and output."""

    exit_code: int
    text: str


Steps = dict[str, Step]
"""The probe's answer: each step by name (`STEPS`)."""


class Probe(Request[Steps]):
    """Runs the three queries of ``nvidia_smi``."""

    program: ClassVar[Program] = PROBE
    default_limit_s: ClassVar[float] = 60.0

    nvidia_smi: tuple[str, ...]
    """The command as argv words (the emulator host passes its stand-in)."""
    gpu_fields: str
    """The ``--query-gpu`` fields."""
    app_fields: str
    """The ``--query-compute-apps`` fields."""

    def answer(self, conn: Connection, result: CommandResult) -> Steps:
        steps: Steps = {}
        current: str | None = None
        body: list[str] = []
        for line in result.stdout.splitlines():
            marker = _STEP_LINE.match(line)
            if marker and marker.group(1) == "begin":
                current, body = marker.group(2), []
            elif marker and current == marker.group(2) and marker.group(3) is not None:
                steps[current] = Step(int(marker.group(3)), "\n".join(body) + "\n")
                current = None
            elif current is not None:
                body.append(line)
        for step in STEPS:
            if step not in steps:
                command = " ".join(self.nvidia_smi)
                raise HostError(
                    f"The GPU probe on {conn.label} stopped before its {step} step "
                    f"(exit {result.exit_code}). {result.stderr.strip()} Run `{command}` on the host to "
                    "see why."
                )
        return steps
