"""The contract of ``env_check.sh``: what a Python environment on the host holds, its folder, the
marker a finished install leaves and the release it answers, without the caller's Python search
path in the way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from sglang_stacks.errors import HostError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import ON_HOST, Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult, tail

__all__ = ["ENV_CHECK", "CheckEnvironment", "EnvCheckExit", "EnvironmentReport", "Runtime"]

Runtime = Literal["sglang", "emulator"]
"""What an environment runs: SGLang, or this checkout's emulator."""


class EnvCheckExit(ProgramExit):
    """How ``env_check.sh`` ends."""

    OK = 0
    """It reported the environment (absent, or what it holds)."""
    NO_ROOT = 2, HostError
    """It could not enter ``/``, where it runs from so no checkout in the working folder stands in
    for what the environment holds."""


ENV_CHECK = Program(
    file="env_check.sh",
    exits=EnvCheckExit,
    error=HostError,
    companions={"INSTALLED_CHECK": "sglang_installed.py"},
)
"""``env_check.sh``; it runs ``sglang_installed.py`` with the environment's python."""


@dataclass(frozen=True)
class EnvironmentReport:
    """What the environment holds."""

    absent: bool
    """No python in the folder: there is no environment."""
    venv: str = ""
    """The folder, absolute."""
    fingerprint: str = ""
    """What the marker of a finished install records ("" when there is none)."""
    version: str | None = None
    """The release line the environment answers, when it answers."""
    version_error: str | None = None
    """Why asking for the release failed, when it did."""


class CheckEnvironment(Request[EnvironmentReport]):
    """Reports the environment in ``venv``."""

    program: ClassVar[Program] = ENV_CHECK
    default_limit_s: ClassVar[float] = 120.0

    venv: Annotated[str, ON_HOST]
    runtime: Runtime
    release: str
    """The release the emulator emulates."""
    marker: str
    """The marker file's name in the folder."""
    prove_import: bool = False
    """Import SGLang too and report the version it answers (an install's check; a refresh reads
    metadata only, as the import takes most of a second)."""

    def answer(self, conn: Connection, result: CommandResult) -> EnvironmentReport:
        found: dict[str, str] = {}
        for line in result.stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                found[key.strip()] = value.strip()
        if found.get("state") == "absent":
            return EnvironmentReport(absent=True)
        return EnvironmentReport(
            absent=False,
            venv=found.get("venv", ""),
            fingerprint=found.get("fingerprint", ""),
            version=found.get("version"),
            version_error=found.get("version_error"),
        )

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        return HostError(
            f"Checking the Python environment {self.venv} on {conn.label} failed (exit {int(code)}): "
            f"{tail(result.stderr or result.stdout)}. Check that the host's shell works and run the "
            "update again."
        )
