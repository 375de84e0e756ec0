"""The post-deploy benchmark: the load generator runs on the GPU host against the ready server,
its numbers become stack outputs and a row of the results history.

It runs again when the server is replaced (a new `server_instance`) or the workload changes, and
not otherwise: an `up` with nothing changed spends no GPU time.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi.dynamic as dynamic
from pulumi.runtime import rpc

from sglang_stacks.components._resource import connect, keep_connection_secret, plain_errors
from sglang_stacks.config.spec import GateSpec
from sglang_stacks.errors import BenchmarkError, HostError, StacksError
from sglang_stacks.hostops import claim, programs
from sglang_stacks.hostops import transport as transport
from sglang_stacks.hostops.transport import quote
from sglang_stacks.results import gate as regression_gate
from sglang_stacks.results import history, loadgen, stats
from sglang_stacks.results.loadgen.contract import Workload

# Inputs whose change makes earlier numbers meaningless: the benchmark runs again.
RERUN_INPUTS = ("server_instance", "workload", "url", "python")
# The load generator arrives as a tar stream on stdin and runs from a scratch folder that goes
# when the script ends, under programs/bound.py: it stops when the session that started it dies
# (a killed update, a dropped connection), and a load generator an earlier session left behind is
# stopped before this one starts, so a benchmark always measures alone.
_RUN_LOADGEN = (
    "scratch=$(mktemp -d) && trap 'rm -rf \"$scratch\"' EXIT "
    '&& tar -x -f - -C "$scratch" --no-same-owner && cd "$scratch" '
    '&& {python} -c "$SGLANG_STACKS_BOUND" {runfile} {label} -- {python} -m {package} {argv}\n'
)


def loadgen_script(props: Mapping[str, Any], workload: Workload) -> tuple[str, dict[str, str]]:
    """The bash that runs the load generator on the host, and the variables it needs."""
    script = _RUN_LOADGEN.format(
        python=quote(props["python"]),
        runfile=quote(f"{str(props['state_dir']).rstrip('/')}/loadgen.json"),
        label=quote(f"stack {props['stack']} (update {props.get('update_id') or 'unnamed'})"),
        package=loadgen.PACKAGE_NAME,
        argv=" ".join(quote(arg) for arg in workload.argv()),
    )
    return script, {"SGLANG_STACKS_BOUND": programs.source("bound.py")}


def run_on_host(props: Mapping[str, Any]) -> dict[str, Any]:
    """Ships the load generator to the host over the session, runs it there, returns its JSON."""
    conn = connect(props)
    workload = Workload.from_settings(props["url"], props["workload"])
    script, env = loadgen_script(props, workload)
    timeout_s = float(props["workload"]["timeout_s"])
    started = time.monotonic()
    try:
        result = transport.run(conn, script, timeout_s=timeout_s, stdin=loadgen.bundle(), env=env)
    except HostError as error:
        raise _dropped(props, conn.label, time.monotonic() - started, timeout_s, error) from None
    if not result.ok:
        raise BenchmarkError(
            f"The benchmark on {conn.label} failed (exit {result.exit_code}): "
            f"{result.stderr.strip()[-2000:] or result.stdout.strip()[-2000:]} "
            "Check that the server still runs (`pulumi refresh`) and that the workload fits its limits."
        )
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _dropped(
    props: Mapping[str, Any], label: str, elapsed_s: float, timeout_s: float, error: HostError
) -> StacksError:
    """The error of a benchmark whose session failed: the host answered the claim just before,
    so the connection settings are right and the connection dropped."""
    if elapsed_s >= timeout_s:
        return error  # the workload's own time limit: the message says so
    said = re.search(r"Last output: (.*?)\.? (Check|Raise|Start)", str(error))
    cause = f" (the SSH client said: {said.group(1)})" if said else ""
    stack = props["stack"]
    return BenchmarkError(
        f"The connection to {label} dropped after {elapsed_s:.0f} s of the benchmark{cause}; nothing "
        "was recorded. The load generator on the host stops with its session, and the next update "
        f"stops any that is left, so it measures alone: once the host answers again, run "
        f"`pulumi up -s {stack}`."
    )


def _check_no_errors(props: Mapping[str, Any], document: Mapping[str, Any]) -> None:
    """BenchmarkError when measured requests failed: tok/s would count them as no tokens."""
    failed = [level for level in document["levels"] if level["errors"]]
    if not failed:
        return
    counts = "; ".join(
        f"{level['errors']} of {level['requests']} measured requests failed at concurrency "
        f"{level['concurrency']} (first: {level['error_samples'][0]})"
        for level in failed
    )
    raise BenchmarkError(
        f"The benchmark of stack {props['stack']!r} on {connect(props).label} is not a measure of the "
        f"server: {counts}. Nothing was recorded. If the server died, `pulumi refresh -s {props['stack']}` "
        f"shows it gone and its log tells why; fix that and run `pulumi up -s {props['stack']}` again."
    )


def measure(props: Mapping[str, Any]) -> dict[str, Any]:
    """Runs the benchmark, records it in the history, and returns the outputs."""
    # GPU time belongs to the stack that holds the claim; a lost claim stops here.
    claim.acquire(
        connect(props),
        props["stack"],
        takeover=False,
        update_id=props["update_id"],
        state_dir=props["state_dir"],
    )
    document = run_on_host(props)
    _check_no_errors(props, document)
    levels = stats.summarize_levels(document)
    headline = levels[0]
    db_path = history.default_history_path()
    history.record(
        db_path,
        props["stack"],
        props["flags_digest"],
        props["sglang_version"],
        props["launch_command"],
        headline,
    )
    if props.get("gate"):
        # Recorded first: a regression stays in the history, where `sglang-stacks rollout` finds it.
        regression_gate.check(props["stack"], headline, GateSpec.model_validate(props["gate"]), db_path)
    return {
        "result": headline.model_dump(mode="json"),
        "levels": [level.model_dump(mode="json") for level in levels],
        "tok_s": round(headline.tok_s_mean, 2),
    }


@plain_errors
class _BenchmarkProvider(dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(str(props["server_instance"]), {**props, **measure(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        # The environment's python is unknown in a preview after an in-place update of the
        # environment (new emulator code), which mostly leaves it as it was: a preview does not
        # announce a new benchmark it cannot know; the update, which knows, reruns if it changed.
        python_unknown = news.get("python") == rpc.UNKNOWN
        rerun = [
            key
            for key in RERUN_INPUTS
            if olds.get(key) != news.get(key) and not (key == "python" and python_unknown)
        ]
        # A new or changed gate is checked against the result already measured: no GPU time.
        regated = olds.get("gate") != news.get("gate")
        changes = bool(rerun) or regated or python_unknown
        return dynamic.DiffResult(changes=changes, replaces=rerun, delete_before_replace=True)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        measured = {key: olds[key] for key in ("result", "levels", "tok_s")}
        if news.get("gate"):
            result = stats.BenchmarkResult.model_validate(olds["result"])
            gate = GateSpec.model_validate(news["gate"])
            regression_gate.check(news["stack"], result, gate, history.default_history_path())
        return dynamic.UpdateResult({**news, **measured})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        # Results stay in the history; there is nothing on the host to remove.
        return None


class Benchmark(dynamic.Resource, module="sglang", name="Benchmark"):
    """The benchmark of one server instance with one workload."""

    tok_s: pulumi.Output[float]
    """Output tokens per second at the first concurrency level, mean over repetitions."""
    result: pulumi.Output[dict[str, Any]]
    """Every metric at the first concurrency level (see `sglang_stacks.results.stats.BenchmarkResult`)."""
    levels: pulumi.Output[list[dict[str, Any]]]
    """The metrics at each concurrency level."""

    def __init__(
        self,
        name: str,
        *,
        connection: pulumi.Input[Mapping[str, Any]],
        stack: str,
        python: pulumi.Input[str],
        url: pulumi.Input[str],
        server_instance: pulumi.Input[str],
        launch_command: pulumi.Input[str],
        sglang_version: pulumi.Input[str],
        flags_digest: pulumi.Input[str],
        workload: Mapping[str, Any],
        state_dir: str,
        update_id: str,
        gate: Mapping[str, Any] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "connection": connection,
            "stack": stack,
            "python": python,
            "url": url,
            "server_instance": server_instance,
            "launch_command": launch_command,
            "sglang_version": sglang_version,
            "flags_digest": flags_digest,
            "workload": dict(workload),
            "gate": dict(gate) if gate else None,
            "state_dir": state_dir,
            "update_id": update_id,
            "result": None,
            "levels": None,
            "tok_s": None,
        }
        super().__init__(_BenchmarkProvider(), name, props, keep_connection_secret(opts))
