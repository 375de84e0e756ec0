"""The canary gate of a fleet's rolling update: before the rest of the fleet changes, the first
replaced replica is measured beside a replica still on the current configuration, under the same
conditions, and must not be slower (tok/s, TTFT) beyond the rollout's tolerances.

Same conditions: the reference leaves the router while the gate measures (the canary is not in it
yet), and both are benchmarked at the same moment, the same way, from the router's machine. A
reference left serving the router's traffic while an idle canary is measured makes the canary
look faster than it is (the fleet's clients share the reference's batch); measured together, both
see the same machine and none of the clients. The reference comes back into the router as soon as
the measurement ends, also when it fails or the update is killed (the engine's watch re-registers
it; a refresh notices any registration still missing and the next ``up`` restores it). The
verdict, with the intervals and the significance, is `sglang_stacks.results.verdict.judge_canary`
on the runs of up to `MEASUREMENTS` such measurements, pooled: the gate measures again while the
verdict passes a change whose interval reaches past the tolerance.

The gate runs once per canary launch. A regressed canary fails the update: the replicas after it
are never touched, the canary stays out of the router, and the router keeps serving from the rest
(``sglang-stacks rollout`` then rolls the canary back: see `sglang_stacks.drive.fleet_rollback`). A
canary on the configuration the router lists for the reference is not judged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import pulumi
from pydantic import Field

from sglang_loadgen.document import Document
from sglang_stacks.components._benchmark_run import run_on_host
from sglang_stacks.components._canary_pairs import PairedWorker, PairRouters, paired_routers
from sglang_stacks.components._canary_reference import Reference, out_of_router, pick_reference
from sglang_stacks.components._refresh import FLEET_READS
from sglang_stacks.config.benchmark_spec import BenchmarkSpec
from sglang_stacks.config.disaggregation import Role
from sglang_stacks.config.fleet import RolloutSpec
from sglang_stacks.errors import BenchmarkError, CanaryRegressionError
from sglang_stacks.resources.benchmark_shape import BenchmarkInputs
from sglang_stacks.resources.provider import LABEL, REPLACES, HostInputs, Props, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for
from sglang_stacks.results import stats, summary
from sglang_stacks.results.stats import Noise
from sglang_stacks.results.verdict import CanaryVerdict, judge_canary, unjudged_canary


class CanaryInputs(HostInputs):
    """The canary, the replica it is judged against, and the gate."""

    stack: Annotated[str, LABEL]
    python: Annotated[str, LABEL]
    """The Python on the router's machine that runs the load generator."""
    canary_url: Annotated[str, REPLACES]
    canary_instance: Annotated[str, REPLACES]
    """The canary launch judged: a new launch is judged anew."""
    reference_url: Annotated[str, LABEL]
    """A replica still on the current configuration (the next batch's first host)."""
    workload: Annotated[BenchmarkSpec, LABEL]
    rollout: Annotated[RolloutSpec, LABEL]
    state_dir: Annotated[str, LABEL]
    router_url: Annotated[str, LABEL] = ""
    """The router, whose worker labels say which configuration the reference serves."""
    config_digest: Annotated[str, LABEL] = ""
    """The configuration the canary runs (see `RouterWorker`'s label)."""
    drain_timeout_s: Annotated[float, LABEL] = 120.0
    """How long the reference may take to finish its requests once out of the router."""
    role: Annotated[Role | None, LABEL] = None
    """In a disaggregated fleet, the role the canary and the reference serve in; none: replicas."""
    partner_url: Annotated[str | None, LABEL] = None
    """A disaggregated fleet's worker of the other role, paired with the canary and with the
    reference for the measurement (see `_canary_pairs`)."""
    bootstrap_ports: Annotated[dict[str, int], LABEL] = Field(default_factory=dict)
    """Each prefill worker's bootstrap port by its URL (a disaggregated fleet's)."""
    router_release: Annotated[str, LABEL] = ""
    """The sglang-router release of the routers a disaggregated fleet's gate pairs workers behind."""


class CanaryOutputs(Props):
    """The verdict, with both measurements."""

    verdict: CanaryVerdict


MEASUREMENTS = 3
"""At most this many side-by-side measurements go into one verdict: the gate measures again,
pooling the runs, while the verdict is unsettled (it passes, but the change's interval reaches past
the tolerance): a busy machine's short benchmarks can hide a real regression in their spread."""

Measure = Callable[[], tuple[Document, Document]]
"""One side-by-side measurement: the canary's load generator document and the reference's."""


def _measure(inputs: CanaryInputs, url: str, instance: str, role: str) -> Document:
    """The workload run on ``url`` from the router's machine (its first level is judged). Each role
    has its own state folder: the load generator stops one left running under the same folder, and
    the canary's and the reference's run side by side."""
    document = run_on_host(
        BenchmarkInputs(
            connection=inputs.connection,
            stack=inputs.stack,
            python=inputs.python,
            url=url,
            server_instance=instance,
            workload=inputs.workload,
            launch_command="",
            sglang_version="",
            flags_digest="",
            state_dir=f"{inputs.state_dir.rstrip('/')}/canary-gate/{role}",
            update_id="",
        )
    )
    level = document.levels[0]
    if level.every_request_failed:
        raise BenchmarkError(
            f"The canary gate's benchmark of the {role} at {url} failed: all {level.requests} requests "
            f"failed (first: {level.error_samples[0] if level.error_samples else 'none sent'}). Check that "
            f"it serves (`pulumi refresh -s {inputs.stack}`), then run `pulumi up -s {inputs.stack}` again."
        )
    return document


def measure_side_by_side(
    inputs: CanaryInputs, canary_url: str, reference_url: str
) -> tuple[Document, Document]:
    """The canary's and the reference's runs (each served at its URL: the replica, or the pair's
    router), measured at the same moment the same way."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="canary-gate") as pool:
        canary = pool.submit(_measure, inputs, canary_url, inputs.canary_instance, "canary")
        measured = pool.submit(_measure, inputs, reference_url, "reference", "reference")
        return canary.result(), measured.result()


def _pooled(documents: list[Document]) -> stats.BenchmarkResult:
    level = summary.pooled([document.levels[0] for document in documents])
    return summary.summarize_levels(dataclasses.replace(documents[0], levels=[level]))[0]


def judged(rollout: RolloutSpec, reference_url: str, measure: Measure) -> CanaryVerdict:
    """The verdict on the canary: ``measure`` run once, and again while the verdict of all its runs
    pooled is unsettled, up to `MEASUREMENTS` times."""
    canary: list[Document] = []
    reference: list[Document] = []
    while True:
        measured = measure()
        canary.append(measured[0])
        reference.append(measured[1])
        verdict = judge_canary(
            _pooled(canary),
            _pooled(reference),
            reference_url=reference_url,
            tok_s_tolerance_pct=rollout.tok_s_tolerance_pct,
            ttft_tolerance_pct=rollout.ttft_tolerance_pct,
            noise=Noise.declared(rollout.launch_cv_pct),
            measurements=len(canary),
        )
        if not verdict.unsettled or len(canary) == MEASUREMENTS:
            return verdict


def _judge_pairs(inputs: CanaryInputs, reference: Reference) -> CanaryVerdict:
    """A disaggregated fleet's canary and reference, each paired with the partner behind a router of
    its own, measured side by side."""
    assert inputs.role is not None and inputs.partner_url is not None  # a disaggregated fleet's gate
    ports = inputs.bootstrap_ports
    partner_role: Role = "decode" if inputs.role == "prefill" else "prefill"
    where = PairRouters(inputs.connection, inputs.python, inputs.router_release, inputs.state_dir)
    with paired_routers(
        where,
        PairedWorker(inputs.canary_url, inputs.role, ports.get(inputs.canary_url)),
        PairedWorker(reference.url, inputs.role, ports.get(reference.url)),
        PairedWorker(inputs.partner_url, partner_role, ports.get(inputs.partner_url)),
    ) as (canary_url, reference_url):
        return judged(
            inputs.rollout, reference.url, lambda: measure_side_by_side(inputs, canary_url, reference_url)
        )


def run_gate(inputs: CanaryInputs) -> CanaryOutputs:
    """Measures the canary beside the reference; CanaryRegressionError when the canary regressed."""
    reference, unjudged = pick_reference(
        inputs.router_url, inputs.canary_url, inputs.reference_url, inputs.config_digest, inputs.role
    )
    if reference is None:
        return CanaryOutputs(verdict=unjudged_canary(unjudged))
    with out_of_router(
        reference,
        connection=inputs.connection,
        canary_url=inputs.canary_url,
        drain_timeout_s=inputs.drain_timeout_s,
        stack=inputs.stack,
        role=inputs.role,
        bootstrap_port=inputs.bootstrap_ports.get(reference.url),
    ):
        if inputs.role is None:
            verdict = judged(
                inputs.rollout,
                reference.url,
                lambda: measure_side_by_side(inputs, inputs.canary_url, reference.url),
            )
        else:
            verdict = _judge_pairs(inputs, reference)
    if not verdict.passed:
        of = "" if inputs.role is None else f" {inputs.role} workers'"
        raise CanaryRegressionError(
            f"The{of} canary of fleet {inputs.stack} regressed: {verdict.line}. The roll stopped "
            "before the other hosts; the canary stays out of the router and the other replicas serve. "
            f"`sglang-stacks rollout {inputs.stack}` rolls it back by itself (fleet.rollout.on_regression: "
            f"roll_back); after a plain `pulumi up`, restore the previous stack file and run `pulumi up -s "
            f"{inputs.stack}`, which relaunches the canary on it. Or loosen fleet.rollout's tolerances.",
            measurements=verdict.line,
            stack=inputs.stack,
        )
    return CanaryOutputs(verdict=verdict)


def upgrade_outputs(props: Mapping[str, Any]) -> dict[str, Any]:
    """A gate's state as an earlier version wrote it (``canary_tok_s``, ``reference_tok_s`` and
    ``verdict`` as a word), in today's shape."""
    state = dict(props)
    if isinstance(state.get("verdict"), str):
        word = state.pop("verdict")
        canary, reference = state.pop("canary_tok_s", None), state.pop("reference_tok_s", None)
        state["verdict"] = CanaryVerdict(
            passed=True,
            line=word if word != "passed" else "passed (means only, judged by an earlier version)",
            canary_tok_s=canary,
            reference_tok_s=reference,
        ).model_dump(mode="json", exclude_none=True)
    return state


class CanaryProvider(TypedProvider[CanaryInputs, CanaryOutputs]):
    """Judges each canary launch once."""

    gathers_with = FLEET_READS

    inputs = CanaryInputs
    outputs = CanaryOutputs

    def resource_id(self, inputs: CanaryInputs, outputs: CanaryOutputs) -> str:
        return inputs.canary_instance

    def upgrade(self, props: Mapping[str, Any]) -> dict[str, Any]:
        return upgrade_outputs(props)

    def create_typed(self, inputs: CanaryInputs) -> CanaryOutputs:
        return run_gate(inputs)


CanaryArgs = args_for(CanaryInputs)
"""`CanaryGate`'s arguments: the fields of `CanaryInputs`, each a value or an Output of one."""


class CanaryGate(TypedResource[CanaryInputs, CanaryOutputs], module="sglang", name="CanaryGate"):
    """The canary replica judged against a replica on the current configuration; its output is
    `CanaryOutputs` (the `CanaryVerdict`: both measurements with their intervals, the change, the
    decision)."""

    def __init__(
        self, name: str, args: Args[CanaryInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(CanaryProvider(), name, args, opts)
