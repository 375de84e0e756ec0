"""The contract of ``sglang_installed.py``: the SGLang release a Python environment holds, read
from its installed metadata with every unconditional requirement checked, never imported.
``env_check.sh`` runs it (its ``INSTALLED_CHECK``) with the environment's own python."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult

__all__ = ["SGLANG_INSTALLED", "InstalledExit", "InstalledRelease", "SGLangRelease"]


class InstalledExit(ProgramExit):
    """How ``sglang_installed.py`` ends."""

    FOUND = 0
    """SGLang and every requirement it declares are installed; it printed the release."""
    MISSING = 1
    """SGLang, its package, or a requirement is missing; stderr names what."""


SGLANG_INSTALLED = Program(file="sglang_installed.py", exits=InstalledExit, error=HostError)
"""``sglang_installed.py``."""


@dataclass(frozen=True)
class SGLangRelease:
    """The answer: the release, or what is missing."""

    release: str | None
    missing: str = ""


class InstalledRelease(Request[SGLangRelease]):
    """Asks the Python that runs it (the host's system python3 through `programs.runner.call`;
    the environment's own under ``env_check.sh``)."""

    program: ClassVar[Program] = SGLANG_INSTALLED

    def answer(self, conn: Connection, result: CommandResult) -> SGLangRelease:
        if result.exit_code == InstalledExit.MISSING:
            return SGLangRelease(release=None, missing=result.stderr.strip())
        return SGLangRelease(release=result.stdout.strip())
