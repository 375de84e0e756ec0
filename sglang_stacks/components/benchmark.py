"""The post-deploy benchmark: the load generator runs on the GPU host against the ready server,
its numbers become stack outputs and a row of the results history.

A benchmark that fails asks the server how it is: one that exited, hangs or answered with errors
is reported as the server's failure (`hostops.server_failure`: its class, log and fix); the
benchmark's own faults (its client, its connection) stay BenchmarkErrors.

It runs again when the server is replaced (a new `server_instance`) or the workload changes, and
not otherwise: an `up` with nothing changed spends no GPU time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import pulumi
from pydantic import Field

from sglang_stacks.components._provider import (
    LABEL,
    REPLACES,
    REPLACES_IF_KNOWN,
    HostInputs,
    Props,
    TypedProvider,
)
from sglang_stacks.components._resource import Args, TypedResource, args_for
from sglang_stacks.config.benchmark_spec import BenchmarkSpec, GateSpec
from sglang_stacks.errors import BenchmarkError, HostError, ServingError, StacksError
from sglang_stacks.hostops import claim, process, programs
from sglang_stacks.hostops import transport as transport
from sglang_stacks.hostops.server_failure import ServerState, serving_failure
from sglang_stacks.hostops.transport import quote, quote_path
from sglang_stacks.results import stats

if TYPE_CHECKING:
    from sglang_stacks.components.server import SGLangServer
    from sglang_stacks.hostops.loadgen.document import Document, Level

# The results modules (the document's reader, measurement) and the load generator's bundle are
# imported in the functions that measure: a program run or a refresh needs none of them.

# The load generator arrives as a tar stream on stdin and runs from a scratch folder that goes
# when the script ends; its progress file stays for `sglang-stacks logs`. It runs under
# programs/bound.py: it stops when the session that started it dies (a killed update, a dropped
# connection), and one an earlier session left behind is stopped before this one starts, so a
# benchmark always measures alone.
_RUN_LOADGEN = (
    "scratch=$(mktemp -d) && trap 'rm -rf \"$scratch\"' EXIT "
    "&& mkdir -p {progress_dir} && : > {progress} "
    '&& tar -x -f - -C "$scratch" --no-same-owner && cd "$scratch" '
    '&& {python} -c "$SGLANG_STACKS_BOUND" {runfile} {label} '
    "-- {python} -m {package} {argv} --progress-file={progress}\n"
)
# The ShareGPT file travels inside the tar stream under this name.
_DATASET_NAME = "dataset.json"


def progress_path(state_dir: str, stack: str) -> str:
    """Where the benchmark of ``stack`` writes its progress lines on the host."""
    return f"{state_dir.rstrip('/')}/benchmarks/{stack}.progress.jsonl"


class MeasuredServer(Props):
    """The server a benchmark measures, asked how it is when the benchmark fails."""

    pid: int
    start_ticks: int
    """With the pid, the process's identity (pids are reused)."""
    port: int
    log_path: str


def measured_server(server: SGLangServer, port: int) -> pulumi.Output[MeasuredServer]:
    """The `MeasuredServer` of a benchmark of ``server``, which serves on ``port``."""
    return pulumi.Output.all(
        server.output(lambda o: o.pid),
        server.output(lambda o: o.start_ticks),
        server.output(lambda o: o.log_path),
    ).apply(lambda found: MeasuredServer(pid=found[0], start_ticks=found[1], port=port, log_path=found[2]))


class BenchmarkInputs(HostInputs):
    """What a benchmark measures; a change of a ``REPLACES`` field means a new measurement."""

    stack: Annotated[str, LABEL]
    """The stack measured (it must hold the host's claim)."""
    python: Annotated[str, REPLACES_IF_KNOWN]
    """The host's Python that runs the load generator."""
    url: Annotated[str, REPLACES]
    """The server's base URL as seen from the host."""
    server_instance: Annotated[str, REPLACES]
    """The server launch measured: a new server means new numbers."""
    workload: Annotated[BenchmarkSpec, REPLACES]
    """The stack's benchmark section."""
    launch_command: Annotated[str, LABEL]
    """Recorded in the history beside the numbers."""
    sglang_version: Annotated[str, LABEL]
    """Recorded in the history beside the numbers."""
    flags_digest: Annotated[str, LABEL]
    """Recorded in the history beside the numbers."""
    gate: GateSpec | None = None
    """The regression gate, judged on the kept result when only it changes (no GPU time)."""
    gpu_hour_price: float | None = None
    """What one GPU costs per hour; a change re-prices the kept result."""
    gpu_count: int = 1
    """GPUs of the host, for the cost per million tokens."""
    state_dir: Annotated[str, LABEL]
    """The host's folder of sglang-stacks state (claim, progress file)."""
    update_id: Annotated[str, LABEL]
    """The running update, for the claim."""
    server: Annotated[MeasuredServer | None, LABEL] = None
    """The one server measured (none behind a router): a failed benchmark asks it how it is."""


class BenchmarkOutputs(Props):
    """The measurement."""

    levels: list[stats.BenchmarkResult] = Field(min_length=1)
    """The metrics at each load level; the first level's are the stack's headline (its tok/s)."""


def run_on_host(inputs: BenchmarkInputs) -> Document:
    """Ships the load generator to the host over the session, runs it there, returns its document."""
    from sglang_stacks.hostops import loadgen
    from sglang_stacks.hostops.loadgen.contract import Workload
    from sglang_stacks.results.summary import read_document

    conn = inputs.connection
    settings = inputs.workload.model_dump(mode="json")
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
    script = _RUN_LOADGEN.format(
        python=quote(inputs.python),
        runfile=quote_path(f"{inputs.state_dir.rstrip('/')}/loadgen.json"),
        label=quote(f"stack {inputs.stack} (update {inputs.update_id or 'unnamed'})"),
        package=loadgen.PACKAGE_NAME,
        argv=" ".join(quote(arg) for arg in workload.argv() if not arg.startswith("--progress-file=")),
        progress=quote_path(progress),
        progress_dir=quote_path(progress.rsplit("/", 1)[0]),
    )
    timeout_s = inputs.workload.timeout_s
    started = time.monotonic()
    try:
        result = transport.run(
            conn,
            script,
            timeout_s=timeout_s,
            stdin=loadgen.bundle(extra),
            env={"SGLANG_STACKS_BOUND": programs.source("bound.py")},
        )
    except HostError as error:
        raise _dropped(inputs, time.monotonic() - started, timeout_s, error) from None
    if not result.ok:
        raise BenchmarkError(
            f"The benchmark on {conn.label} failed (exit {result.exit_code}): "
            f"{result.stderr.strip()[-2000:] or result.stdout.strip()[-2000:]} "
            "Check that the server still runs (`pulumi refresh`) and that the workload fits its limits."
        )
    return read_document(result.stdout)


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


def _failed_requests(
    inputs: BenchmarkInputs, failed: Sequence[Level], *, server_serves: bool
) -> BenchmarkError:
    """The error of a benchmark whose measured requests failed, not by the server's fault as far
    as it can be told (``server_serves``: it was asked, and runs and answers its health check):
    tok/s would count them as no tokens, so nothing is recorded."""
    counts = "; ".join(
        f"{level.errors} of {level.requests} measured requests failed at {level.name} "
        f"(first: {level.error_samples[0]})"
        for level in failed
    )
    stack = inputs.stack
    where = (
        "The server still runs and answers its health check, so they failed on the way (the load "
        "generator or the connection): check the network and the workload's request_timeout_s, then "
        f"run `pulumi up -s {stack}` again."
        if server_serves
        else f"If a server died, `pulumi refresh -s {stack}` shows it gone and its log tells why; fix "
        f"that and run `pulumi up -s {stack}` again."
    )
    return BenchmarkError(
        f"The benchmark of stack {stack!r} on {inputs.connection.label} is not a measure of the "
        f"server: {counts}. Nothing was recorded. {where}",
        stack=stack,
    )


def _server_state(inputs: BenchmarkInputs) -> ServerState | None:
    """How the measured server is after a failed benchmark, or None when it cannot be asked (no
    one server behind a router, or a host that does not answer)."""
    server = inputs.server
    if server is None:
        return None
    try:
        return process.server_state(
            inputs.connection,
            process.Running(server.pid, server.start_ticks),
            python=inputs.python,
            port=server.port,
            log_path=server.log_path,
        )
    except StacksError:
        return None  # the host does not answer: the benchmark's own error says what happened


def _server_failure(
    inputs: BenchmarkInputs, state: ServerState | None, answered_errors: str = ""
) -> ServingError | None:
    """The measured server's own failure, or None when it serves as it should (or was not asked)."""
    if state is None or inputs.server is None:
        return None
    return serving_failure(
        inputs.connection,
        state,
        log_path=inputs.server.log_path,
        stack=inputs.stack,
        answered_errors=answered_errors,
    )


def _measured(inputs: BenchmarkInputs) -> Document:
    """The load generator's document, once every measured request succeeded; the server's failure
    (ServingError) or the benchmark's own (BenchmarkError, HostError) otherwise."""
    try:
        document = run_on_host(inputs)
    except StacksError:
        failure = _server_failure(inputs, _server_state(inputs))
        if failure is None:
            raise
        # The benchmark's error (a connection reset, no request answered) is what the server's
        # failure caused: the server's log says why.
        raise failure from None
    failed = [level for level in document.levels if level.errors]
    if failed:
        answered = "; ".join(
            f"{level.answered_by_the_server} of {level.requests} measured requests at {level.name} "
            f"(first: {level.error_samples[0]})"
            for level in failed
            if level.answered_by_the_server
        )
        state = _server_state(inputs)
        raise _server_failure(inputs, state, answered) or _failed_requests(
            inputs, failed, server_serves=state is not None
        )
    return document


def measure(inputs: BenchmarkInputs) -> BenchmarkOutputs:
    """Runs the benchmark, records it in the history, judges the gate, and returns the outputs."""
    from sglang_stacks.results import measurement

    # GPU time belongs to the stack that holds the claim; a lost claim stops here.
    claim.acquire(
        inputs.connection,
        inputs.stack,
        takeover=False,
        update_id=inputs.update_id,
        state_dir=inputs.state_dir,
    )
    document = _measured(inputs)
    measured = measurement.Measured(
        inputs.stack, inputs.flags_digest, inputs.sglang_version, inputs.launch_command
    )
    levels = measurement.record(
        measured,
        document,
        slo=inputs.workload.slo,
        host_price_per_hour=_host_price(inputs),
        gate=inputs.gate,
    )
    return BenchmarkOutputs(levels=list(levels))


def _host_price(inputs: BenchmarkInputs) -> float | None:
    """What the whole host costs per hour: the declared price of one GPU times the GPU count."""
    price = inputs.gpu_hour_price
    return price * inputs.gpu_count if price else None


def upgrade_result(level: Mapping[str, Any]) -> dict[str, Any]:
    """A result recorded by an earlier version, its tok/s figures in today's precision."""
    figure = stats.tok_s_figure
    upgraded = dict(level)
    for key in ("tok_s_mean", "tok_s_stdev"):
        if isinstance(level.get(key), int | float):
            upgraded[key] = figure(level[key])
    for key in ("tok_s_ci95", "tok_s_runs"):
        if isinstance(level.get(key), list):
            upgraded[key] = [figure(value) for value in level[key]]
    goodput = level.get("goodput")
    if isinstance(goodput, Mapping) and isinstance(goodput.get("tok_s"), int | float):
        upgraded["goodput"] = {**goodput, "tok_s": figure(goodput["tok_s"])}
    return upgraded


class BenchmarkProvider(TypedProvider[BenchmarkInputs, BenchmarkOutputs]):
    """Measures once per server instance and workload; re-reads the kept result for the rest."""

    inputs = BenchmarkInputs
    outputs = BenchmarkOutputs

    def resource_id(self, inputs: BenchmarkInputs, outputs: BenchmarkOutputs) -> str:
        return inputs.server_instance

    def upgrade(self, props: Mapping[str, Any]) -> dict[str, Any]:
        # Earlier versions kept a result's tok/s figures to 0.001, and the first level twice more
        # (``result``, and ``tok_s`` to 0.01): their results, in today's precision.
        if "tok_s" not in props or not isinstance(props.get("levels"), list):
            return dict(props)
        return {**props, "levels": [upgrade_result(level) for level in props["levels"]]}

    def create_typed(self, inputs: BenchmarkInputs) -> BenchmarkOutputs:
        return measure(inputs)

    def update_typed(
        self, olds: BenchmarkOutputs, old_inputs: BenchmarkInputs, news: BenchmarkInputs
    ) -> BenchmarkOutputs:
        # A new gate or price is applied to the result already measured: no GPU time.
        from sglang_stacks.results import measurement

        levels = measurement.rejudge(
            news.stack, olds.levels, host_price_per_hour=_host_price(news), gate=news.gate
        )
        return BenchmarkOutputs(levels=list(levels))


BenchmarkArgs = args_for(BenchmarkInputs)
"""`Benchmark`'s arguments: the fields of `BenchmarkInputs`, each a value or an Output of one."""


class Benchmark(TypedResource[BenchmarkInputs, BenchmarkOutputs], module="sglang", name="Benchmark"):
    """The benchmark of one server instance with one workload; its outputs are `BenchmarkOutputs`."""

    def __init__(
        self, name: str, args: Args[BenchmarkInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(BenchmarkProvider(), name, args, opts)
