"""The contract of ``loadgen_run.sh``: the benchmark's load generator run on the host, shipped over
the session as a tar stream (with the workload's dataset), bound to that session by ``bound.py``.
It ends with the load generator's exit code, or ``bound.py``'s own."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from sglang_loadgen.contract import LoadgenExit
from sglang_stacks.errors import BenchmarkError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.bound_contract import BoundExit
from sglang_stacks.hostops.programs.contract import ON_HOST, Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult

__all__ = ["LOADGEN_RUN", "LoadgenRunExit", "RunLoadgen"]


class LoadgenRunExit(ProgramExit):
    """How ``loadgen_run.sh`` ends: the codes of the programs it runs, passed on."""

    MEASURED = LoadgenExit.MEASURED
    """The load generator printed its document."""
    EVERY_REQUEST_FAILED = LoadgenExit.EVERY_REQUEST_FAILED
    """Every measured request of a level failed: the load generator stopped there and printed its
    document all the same, which says how each failed (whose failure that is, the reader decides)."""
    FAILED = LoadgenExit.FAILED, BenchmarkError
    """The load generator refused the workload or could not prepare it (its sentence on stderr), or
    the scratch or progress folder could not be made (``set -e`` passes the 1 on)."""
    USAGE = LoadgenExit.USAGE, BenchmarkError
    """The load generator refused its command line, or ``tar`` could not unpack the stream."""
    HUNG_UP = BoundExit.HUNG_UP, BenchmarkError
    """A HUP stopped ``bound.py``, and the load generator with it."""
    TERMINATED = BoundExit.TERMINATED, BenchmarkError
    """A TERM stopped ``bound.py``, and the load generator with it."""
    SESSION_GONE = BoundExit.SESSION_GONE, BenchmarkError
    """``bound.py`` stopped the load generator: the session that started it ended."""


LOADGEN_RUN = Program(
    file="loadgen_run.sh",
    exits=LoadgenRunExit,
    error=BenchmarkError,
    companions={"BOUND": "bound.py"},
    passes_on=(LoadgenExit, BoundExit),
)
"""``loadgen_run.sh``; it runs the load generator under ``bound.py``."""


class RunLoadgen(Request[str]):
    """Runs the load generator with ``options`` against the server; the answer is the JSON text of
    its document (``results.summary.read_document`` reads it into its types)."""

    program: ClassVar[Program] = LOADGEN_RUN

    python: str
    """The environment's python, which has the load generator's dependencies."""
    package: str
    """The load generator's package name in the stream."""
    runfile: Annotated[str, ON_HOST]
    label: str
    options: tuple[str, ...]
    """The load generator's command line, without ``--progress-file``."""
    progress: Annotated[str, ON_HOST]
    """Its progress file, kept for ``sglang-stacks logs``."""
    bundle: bytes = Field(exclude=True, repr=False)
    """The tar stream of the package (and the dataset), its standard input."""

    def stdin(self) -> bytes:
        return self.bundle

    def answer(self, conn: Connection, result: CommandResult) -> str:
        return result.stdout

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        said = result.stderr.strip()[-2000:] or result.stdout.strip()[-2000:]
        return BenchmarkError(
            f"The benchmark on {conn.label} failed (exit {int(code)}): {said} Check that the server "
            "still runs (`pulumi refresh`) and that the workload fits its limits."
        )
