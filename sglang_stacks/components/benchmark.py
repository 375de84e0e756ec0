"""The post-deploy benchmark: the load generator runs on the GPU host against the ready server,
its numbers become stack outputs and a row of the results history.

It runs again when the server is replaced (a new `server_instance`) or the workload changes, and
not otherwise: an `up` with nothing changed spends no GPU time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic as dynamic

from sglang_stacks.components._resource import connect, keep_connection_secret, plain_errors
from sglang_stacks.config.spec import GateSpec
from sglang_stacks.errors import BenchmarkError
from sglang_stacks.hostops import claim
from sglang_stacks.hostops import transport as transport
from sglang_stacks.hostops.transport import quote, quote_path
from sglang_stacks.results import gate as regression_gate
from sglang_stacks.results import history, loadgen, stats
from sglang_stacks.results.loadgen.contract import Workload

# Inputs whose change makes earlier numbers meaningless: the benchmark runs again.
RERUN_INPUTS = ("server_instance", "workload", "url", "python")
# Inputs that only change how the numbers are read: applied to the kept result, no GPU time.
REREAD_INPUTS = ("gate", "gpu_hour_price", "gpu_count")
# The load generator arrives as a tar stream on stdin and runs from a scratch folder that goes
# when the script ends; its progress file stays for `sglang-stacks logs`.
_RUN_LOADGEN = (
    "scratch=$(mktemp -d) && trap 'rm -rf \"$scratch\"' EXIT "
    "&& mkdir -p {progress_dir} && : > {progress} "
    '&& tar -x -f - -C "$scratch" --no-same-owner && cd "$scratch" '
    "&& {python} -m {package} {argv} --progress-file={progress}\n"
)
# The ShareGPT file travels inside the tar stream under this name.
_DATASET_NAME = "dataset.json"


def progress_path(state_dir: str, stack: str) -> str:
    """Where the benchmark of ``stack`` writes its progress lines on the host."""
    return f"{state_dir.rstrip('/')}/benchmarks/{stack}.progress.jsonl"


def run_on_host(props: Mapping[str, Any]) -> dict[str, Any]:
    """Ships the load generator to the host over the session, runs it there, returns its JSON."""
    conn = connect(props)
    settings = dict(props["workload"])
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
    workload = Workload.from_settings(props["url"], settings)
    progress = progress_path(props["state_dir"], props["stack"])
    script = _RUN_LOADGEN.format(
        python=quote(props["python"]),
        package=loadgen.PACKAGE_NAME,
        argv=" ".join(quote(arg) for arg in workload.argv() if not arg.startswith("--progress-file=")),
        progress=quote_path(progress),
        progress_dir=quote_path(progress.rsplit("/", 1)[0]),
    )
    result = transport.run(
        conn, script, timeout_s=float(props["workload"]["timeout_s"]), stdin=loadgen.bundle(extra)
    )
    if not result.ok:
        raise BenchmarkError(
            f"The benchmark on {conn.label} failed (exit {result.exit_code}): "
            f"{result.stderr.strip()[-2000:] or result.stdout.strip()[-2000:]} "
            "Check that the server still runs (`pulumi refresh`) and that the workload fits its limits."
        )
    document: dict[str, Any] = json.loads(result.stdout)
    return document


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
    levels = _summarize(props, document)
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
    return _outputs(levels)


def _summarize(props: Mapping[str, Any], document: Mapping[str, Any]) -> tuple[stats.BenchmarkResult, ...]:
    """The results of a load generator document, with goodput under the stack's SLO and the cost."""
    slo_limits = props["workload"].get("slo")
    slo = stats.Slo(**{k: v for k, v in slo_limits.items() if v is not None}) if slo_limits else None
    return stats.summarize_levels(document, slo=slo, gpu_hour_price=_host_price(props))


def _host_price(props: Mapping[str, Any]) -> float | None:
    """What the whole host costs per hour: the declared price of one GPU times the GPU count."""
    price = props.get("gpu_hour_price")
    return float(price) * int(props.get("gpu_count") or 1) if price else None


def _cost(host_price: float | None, level: stats.BenchmarkResult) -> float | None:
    return stats.cost_per_mtok(host_price, level.tok_s_mean)


def _outputs(levels: tuple[stats.BenchmarkResult, ...]) -> dict[str, Any]:
    headline = levels[0]
    return {
        "result": headline.model_dump(mode="json"),
        "levels": [level.model_dump(mode="json") for level in levels],
        "tok_s": round(headline.tok_s_mean, 2),
        "goodput": headline.goodput.model_dump(mode="json") if headline.goodput else None,
    }


@plain_errors
class _BenchmarkProvider(dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(str(props["server_instance"]), {**props, **measure(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        rerun = [key for key in RERUN_INPUTS if olds.get(key) != news.get(key)]
        # A new gate or price is applied to the result already measured: no GPU time.
        reread = [key for key in REREAD_INPUTS if olds.get(key) != news.get(key)]
        return dynamic.DiffResult(changes=bool(rerun or reread), replaces=rerun, delete_before_replace=True)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        levels = tuple(stats.BenchmarkResult.model_validate(level) for level in olds["levels"])
        price = _host_price(news)
        measured = _outputs(
            tuple(level.model_copy(update={"cost_per_mtok": _cost(price, level)}) for level in levels)
        )
        if news.get("gate"):
            result = stats.BenchmarkResult.model_validate(measured["result"])
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
    """The metrics at each load level."""
    goodput: pulumi.Output[dict[str, Any] | None]
    """Requests and tokens per second within the stack's SLO at the first level; None without one."""

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
        gpu_hour_price: float | None = None,
        gpu_count: int = 1,
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
            "gpu_hour_price": gpu_hour_price,
            "gpu_count": gpu_count,
            "result": None,
            "levels": None,
            "tok_s": None,
            "goodput": None,
        }
        super().__init__(_BenchmarkProvider(), name, props, keep_connection_secret(opts))
