"""The programs that run on a GPU host, as real files beside this module: bash (``*.sh``) and
Python (``*.py``, standard library only: a host may have nothing else).

A program is shipped over the session the way every script is (nothing is installed on the
host): a bash program is the script itself, its parameters exported at its top as upper-case
variables; a Python program travels in the variable ``SGLANG_STACKS_PROGRAM`` and runs with
``python -c``, so the command's standard input stays free for data (``python=None`` picks the
host's system python3, isolated from the user's site-packages, through ``system_python.sh``).
Parameters never carry secrets on a command line: secrets go in ``stdin``. A parameter that is a
path on the host is a `HostPath`: its leading ``~/`` reaches the program already expanded to the
host user's home folder, so no program repeats that expansion.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.session import Session, open_session
from sglang_stacks.hostops.transport import CommandResult, HostPath, quote, run

FOLDER = Path(__file__).resolve().parent

Param = str | int | float | bool
"""A program parameter; a `HostPath` (a ``str``) is expanded on the host."""


@functools.cache
def source(name: str) -> str:
    """The text of the program ``name`` (``claim.py``, ``stop.sh``...)."""
    return (FOLDER / name).read_text()


def _variables(params: Mapping[str, Param]) -> dict[str, str]:
    def word(value: Param) -> str:
        if isinstance(value, HostPath):
            return value  # exported by `transport.run` with its ~/ expanded on the host
        if isinstance(value, bool):
            return "1" if value else ""
        return f"{value:g}" if isinstance(value, float) else str(value)

    return {name.upper(): word(value) for name, value in params.items()}


def run_bash(
    conn: Connection,
    name: str,
    params: Mapping[str, Param] | None = None,
    *,
    timeout_s: float,
    stdin: bytes | None = None,
) -> CommandResult:
    """Runs the bash program ``name`` on the host with ``params`` as its variables."""
    return run(conn, source(name), timeout_s=timeout_s, stdin=stdin, env=_variables(params or {}))


def python_script(name: str, args: Sequence[str], *, python: str | None) -> tuple[str, dict[str, str]]:
    """The bash that runs the Python program ``name`` with ``args``, and the variables it needs.

    ``python`` None means the host's system python3 in isolated mode: a program that needs nothing
    but the standard library starts fastest there, and no user site or PYTHON* variable reaches it.
    """
    words = " ".join(quote(arg) for arg in args)
    env = {"SGLANG_STACKS_PROGRAM": source(name)}
    if python is None:
        return f"set -- {words}\n{source('system_python.sh')}", env
    return f'exec {quote(python)} -c "$SGLANG_STACKS_PROGRAM" {words}\n', env


def run_python(
    conn: Connection,
    name: str,
    args: list[str],
    *,
    python: str | None = "python3",
    timeout_s: float,
    stdin: bytes | None = None,
) -> CommandResult:
    """Runs the Python program ``name`` with the host's ``python`` and ``args``."""
    script, env = python_script(name, args, python=python)
    return run(conn, script, timeout_s=timeout_s, stdin=stdin, env=env)


def open_python(conn: Connection, name: str, args: Sequence[str], *, python: str | None = None) -> Session:
    """Starts the Python program ``name`` and leaves it running, to talk to line by line."""
    script, env = python_script(name, args, python=python)
    return open_session(conn, script, env=env)
