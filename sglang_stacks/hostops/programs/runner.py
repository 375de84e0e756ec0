"""`call`: runs a host program's request on a host and returns its typed answer; the one runner
of the programs of this folder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import Request, raised_as, source
from sglang_stacks.hostops.programs.system_python_contract import SYSTEM_PYTHON
from sglang_stacks.hostops.session import open_session
from sglang_stacks.hostops.transport import quote, run, tail

__all__ = ["call", "python_script"]

AnswerT = TypeVar("AnswerT")


def python_script(name: str, args: Sequence[str]) -> tuple[str, dict[str, str]]:
    """The bash that runs the Python program ``name`` with ``args`` by the host's system python3,
    and the variables it needs: a program that needs nothing but the standard library starts
    fastest there, and no user site or PYTHON* variable reaches it."""
    words = " ".join(quote(arg) for arg in args)
    return f"set -- {words}\n{source(SYSTEM_PYTHON.file)}", {"SGLANG_STACKS_PROGRAM": source(name)}


def _command(request: Request[AnswerT]) -> tuple[str, dict[str, str]]:
    if request.program.is_python:
        return python_script(request.program.file, request.argv())
    return source(request.program.file), request.variables()


def call(conn: Connection, request: Request[AnswerT]) -> AnswerT:
    """Runs the program ``request`` calls on the host and returns its typed answer.

    An exit code its contract names as a failure is raised as that error, worded by the contract;
    an exit code the contract does not name is raised as the program's own error class.
    """
    program = request.program
    script, env = _command(request)
    if request.held:
        session = open_session(conn, script, env=env)
        try:
            return request.held_answer(conn, session)
        except BaseException:
            session.close()
            raise
    result = run(conn, script, timeout_s=request.run_limit_s(), stdin=request.stdin(), env=env)
    # A Python program's launcher speaks first: it exits before the program runs.
    launcher = SYSTEM_PYTHON.exit_named(result.exit_code) if program.is_python else None
    code = launcher if launcher is not None and launcher.error else program.exit_named(result.exit_code)
    if code is None:
        raise raised_as(
            program.error,
            f"{request.doing()} on {conn.label} ended with exit {result.exit_code}, which it never "
            f"gives on purpose: {tail(result.stderr or result.stdout)}. Check the host's logs (out of "
            "memory, a full disk) and run the update again.",
        )
    if code.error is not None:
        raise request.failure(conn, code, result)
    return request.answer(conn, result)
