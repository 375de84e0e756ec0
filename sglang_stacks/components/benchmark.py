"""The post-deploy benchmark as a Pulumi resource: its provider measures the ready server once per
server instance and workload, records the numbers in the results history and makes them outputs.

It runs again when the server is replaced (a new `server_instance`) or the workload changes, and
not otherwise: an `up` with nothing changed spends no GPU time. Its inputs and outputs are
`resources.benchmark_shape`'s, the load generator's run on the host `_benchmark_run`'s, and whose failure a
failed benchmark is (the server's, or its own) `_benchmark_failure`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from sglang_stacks.components._benchmark_failure import measured_document
from sglang_stacks.components._refresh import HOST_READS
from sglang_stacks.config.benchmark_spec import BenchmarkSpec
from sglang_stacks.config.disaggregation import Role
from sglang_stacks.hostops import claim
from sglang_stacks.resources.benchmark_shape import BenchmarkInputs, BenchmarkOutputs
from sglang_stacks.resources.engine_status import own_urn
from sglang_stacks.resources.provider import TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for
from sglang_stacks.results import stats
from sglang_stacks.results.outputs import ReplicaOutputs

# The results' measurement (the history, the gate) is imported in the functions that use it: a
# program run or a refresh needs none of it.


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
    document = measured_document(inputs)
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

    gathers_with = HOST_READS

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
        # Its progress goes to its own row of `pulumi up`: the provider is told where that is.
        urn = own_urn(name, "sglang", "Benchmark", opts.parent if opts else None)
        args = Args(BenchmarkInputs, {**args.values, "own_urn": urn})
        super().__init__(BenchmarkProvider(), name, args, opts)


def replica_outputs(
    index: int,
    url: pulumi.Input[str],
    launch_command: pulumi.Input[str],
    benchmark: Benchmark | None,
    role: Role | None,
) -> pulumi.Output[ReplicaOutputs]:
    """What a fleet's outputs say of one replica, on hosts or on a cluster alike: where it serves,
    its command, its role and its own benchmark's tok/s at the first level (none for a worker that
    serves only in a pair, or in a fleet measured through its router only)."""
    tok_s = (
        benchmark.output(lambda o: o.levels).apply(lambda levels: levels[0].tok_s_mean) if benchmark else None
    )
    return pulumi.Output.all(url, launch_command, tok_s).apply(
        lambda found: ReplicaOutputs(
            host=index, url=found[0], launch_command=found[1], tok_s=found[2], role=role
        )
    )


def measured_outputs(
    benchmark: TypedResource[Any, BenchmarkOutputs], workload: BenchmarkSpec
) -> dict[str, pulumi.Output[Any]]:
    """What a stack on one host or on a cluster says of its benchmark: ``tok_s``, ``goodput`` and
    ``benchmark`` at the first level, and ``benchmark_levels`` when the workload has more than one
    (a second copy of the only level would double the summary `pulumi up` ends with)."""
    levels = benchmark.output(lambda o: o.levels)
    first = levels.apply(lambda found: found[0])
    said: dict[str, pulumi.Output[Any]] = {
        "tok_s": first.apply(lambda result: result.tok_s_mean),
        "benchmark": first,
        "goodput": first.apply(lambda result: result.goodput),
    }
    if len(workload.levels) > 1:
        said["benchmark_levels"] = levels
    return said
