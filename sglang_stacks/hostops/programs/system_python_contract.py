"""The contract of ``system_python.sh``: the launcher of every Python program of this folder. It
runs the program in ``SGLANG_STACKS_PROGRAM`` with the host's system python3 (isolated: no user
site-packages, no PYTHON* variables) and its positional parameters as the program's arguments;
the exit code is then the program's, except when the host has no python3 at all."""

from __future__ import annotations

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.programs.contract import Program, ProgramExit

__all__ = ["SYSTEM_PYTHON", "SystemPythonExit"]


class SystemPythonExit(ProgramExit):
    """The launcher's own exit code; any other is the program's."""

    NO_PYTHON = 3, HostError
    """The host has no python3, which sglang-stacks needs there: install python3."""


SYSTEM_PYTHON = Program(file="system_python.sh", exits=SystemPythonExit, error=HostError)
"""The launcher; `programs.call` runs every Python program through it."""
