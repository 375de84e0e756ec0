"""The load generator's run on the GPU host: shipped over the session as a tar stream with the
workload's dataset, run against the server, its document read back; a dropped session named.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sglang_stacks.errors import BenchmarkError, HostError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.logs import describe_progress
from sglang_stacks.hostops.programs.loadgen_run_contract import RunLoadgen
from sglang_stacks.hostops.programs.logs_contract import FollowProgress
from sglang_stacks.hostops.programs.runner import call
from sglang_stacks.resources.benchmark_shape import BenchmarkInputs
from sglang_stacks.resources.engine_status import EngineStatus

if TYPE_CHECKING:
    from sglang_loadgen.document import Document

# The results' document reader and the load generator's bundle are imported in the function that
# runs it: a program run or a refresh needs neither.

# The ShareGPT file travels inside the tar stream under this name.
_DATASET_NAME = "dataset.json"
# The longest a benchmark's progress may be silent: it writes a line every few seconds.
_SILENT_S = 24 * 3600.0


def progress_path(state_dir: str, stack: str) -> str:
    """Where the benchmark of ``stack`` writes its progress lines on the host."""
    return f"{state_dir.rstrip('/')}/benchmarks/{stack}.progress.jsonl"


def run_on_host(inputs: BenchmarkInputs) -> Document:
    """Ships the load generator to the host over the session, runs it there, returns its document:
    also when every measured request of a level failed (it stops there; the level says how)."""
    import sglang_loadgen as loadgen
    from sglang_loadgen.contract import Workload
    from sglang_stacks.results.summary import read_document

    conn = inputs.connection
    settings = inputs.workload.settings()
    extra: dict[str, bytes] = {}
    if settings.get("dataset_path"):
        path = Path(settings["dataset_path"]).expanduser()
        try:
            extra[_DATASET_NAME] = path.read_bytes()
        except OSError as exc:
            raise BenchmarkError(
                f"sglang-stacks:benchmark.dataset_path {str(path)!r} cannot be read ({exc}); "
                "point it at a ShareGPT-format JSON file on this machine."
            ) from exc
        settings["dataset_path"] = _DATASET_NAME
    workload = Workload.from_settings(inputs.url, settings)
    progress = progress_path(inputs.state_dir, inputs.stack)
    run = RunLoadgen(
        python=inputs.python,
        package=loadgen.PACKAGE_NAME,
        runfile=f"{inputs.state_dir.rstrip('/')}/loadgen.json",
        label=f"stack {inputs.stack} (update {inputs.update_id or 'unnamed'})",
        options=tuple(arg for arg in workload.argv() if not arg.startswith("--progress-file=")),
        progress=progress,
        bundle=loadgen.bundle(extra),
        limit_s=inputs.workload.timeout_s,
    )
    started = time.monotonic()
    try:
        with _reported(conn, progress, inputs.own_urn):
            printed = call(conn, run)
    except HostError as error:
        raise _dropped(inputs, time.monotonic() - started, run.run_limit_s(), error) from None
    return read_document(printed)


@contextlib.contextmanager
def _reported(conn: Connection, progress: str, urn: str) -> Iterator[None]:
    """While the body runs the benchmark, each progress line it writes on the host is shown on the
    benchmark's row of ``pulumi up`` (level, repetition i of n, tok/s so far). Only inside a
    provider process; a follower that cannot start costs the benchmark nothing."""
    status = EngineStatus(urn)
    if not status.active:
        yield
        return
    try:
        session = call(conn, FollowProgress(progress=progress))
    except StacksError:
        status.close()
        yield
        return

    def relay() -> None:
        with contextlib.suppress(StacksError):  # the session ends when the benchmark does
            while True:
                status.say(describe_progress(session.read_line(timeout_s=_SILENT_S)))

    relaying = threading.Thread(target=relay, name="benchmark-progress", daemon=True)
    relaying.start()
    try:
        yield
    finally:
        session.close(timeout_s=5)
        relaying.join(timeout=10)
        status.close()


def _dropped(inputs: BenchmarkInputs, elapsed_s: float, timeout_s: float, error: HostError) -> StacksError:
    """The error of a benchmark whose session failed: the host answered the claim just before,
    so the connection settings are right and the connection dropped."""
    if elapsed_s >= timeout_s:
        return error  # the workload's own time limit: the message says so
    cause = f" (the SSH client said: {error.last_output})" if error.last_output else ""
    return BenchmarkError(
        f"The connection to {inputs.connection.label} dropped after {elapsed_s:.0f} s of the benchmark"
        f"{cause}; nothing was recorded. The load generator on the host stops with its session, and "
        "the next update stops any that is left, so it measures alone: once the host answers again, "
        f"run `pulumi up -s {inputs.stack}`."
    )
