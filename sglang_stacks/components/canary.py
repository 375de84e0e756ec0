"""The canary gate of a fleet's rolling update: before the rest of the fleet changes, the first
replaced replica is benchmarked beside a replica still on the current configuration, from the
router's machine, and must not be slower (tok/s, TTFT) beyond the rollout's tolerances.

The gate runs once per canary launch. A regressed canary fails the update: the replicas after it
are never touched, the canary stays out of the router, and the router keeps serving from the rest
(``sglang-stacks rollout`` then rolls the canary back: see `sglang_stacks.drive.fleet_rollback`). A
canary on the configuration the router lists for the reference is not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import pulumi
import pulumi.dynamic as dynamic

from sglang_stacks.components import _router_api
from sglang_stacks.components._provider import (
    LABEL,
    REPLACES,
    HostInputs,
    Props,
    TypedProvider,
    keep_connection_secret,
    resource_props,
)
from sglang_stacks.components.benchmark import BenchmarkInputs, run_on_host
from sglang_stacks.config.benchmark_spec import BenchmarkSpec
from sglang_stacks.config.fleet import RolloutSpec
from sglang_stacks.errors import CanaryRegressionError
from sglang_stacks.results import stats, summary


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


class CanaryOutputs(Props):
    """Both measurements and the verdict."""

    canary_tok_s: float
    reference_tok_s: float | None = None
    """None when no replica answered on the current configuration (the fleet's first deploy)."""
    verdict: str


def _measure(inputs: CanaryInputs, url: str, instance: str) -> stats.BenchmarkResult:
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
            state_dir=inputs.state_dir,
            update_id="",
        )
    )
    return summary.summarize_levels(document)[0]


def _reachable(url: str) -> bool:
    import httpx  # the provider's own process: imported where it is used

    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def judge(canary: stats.BenchmarkResult, reference: stats.BenchmarkResult, rollout: RolloutSpec) -> list[str]:
    """The ways the canary regressed against the reference, as sentences (none: it passed)."""
    problems: list[str] = []
    if rollout.tok_s_tolerance_pct is not None:
        floor = reference.tok_s_mean * (1 - rollout.tok_s_tolerance_pct / 100)
        if canary.tok_s_mean < floor:
            change = 100 * (canary.tok_s_mean / reference.tok_s_mean - 1)
            problems.append(
                f"tok/s {canary.tok_s_mean:.1f} against {reference.tok_s_mean:.1f} ({change:+.1f} %, "
                f"tolerance {rollout.tok_s_tolerance_pct:g} %)"
            )
    if rollout.ttft_tolerance_pct is not None and canary.ttft_ms and reference.ttft_ms:
        ceiling = reference.ttft_ms.p50 * (1 + rollout.ttft_tolerance_pct / 100)
        if canary.ttft_ms.p50 > ceiling:
            problems.append(
                f"median TTFT {canary.ttft_ms.p50:.1f} ms against {reference.ttft_ms.p50:.1f} ms "
                f"(tolerance {rollout.ttft_tolerance_pct:g} %)"
            )
    return problems


def _served(inputs: CanaryInputs) -> dict[str, str]:
    """The router's workers and the configuration digest each serves ({} without a router)."""
    import httpx

    try:
        return _router_api.worker_configs(inputs.router_url) if inputs.router_url else {}
    except httpx.HTTPError:
        return {}


def pick_reference(inputs: CanaryInputs) -> tuple[str | None, str]:
    """The replica to judge the canary against, or None and why there is nothing to judge.

    The declared reference first, then any other replica in the router: a dead reference must not
    let a regression through unjudged. A reference the router lists with the canary's own
    configuration (a roll back, a restored stack file) means there is no change to judge, only the
    noise of two measurements.
    """
    served = _served(inputs)
    canary = inputs.canary_url.rstrip("/")
    others = [url for url in served if url not in (canary, inputs.reference_url.rstrip("/"))]
    for url in [inputs.reference_url.rstrip("/"), *others]:
        if not _reachable(url):
            continue
        if inputs.config_digest and served.get(url) == inputs.config_digest:
            return None, "the canary runs the configuration the fleet serves: no change to judge"
        return url, ""
    return None, "no replica on the current configuration answered: nothing to compare with"


def run_gate(inputs: CanaryInputs) -> CanaryOutputs:
    """Measures the canary and the reference; CanaryRegressionError when the canary regressed."""
    canary = _measure(inputs, inputs.canary_url, inputs.canary_instance)
    reference_url, unjudged = pick_reference(inputs)
    if reference_url is None:
        return CanaryOutputs(canary_tok_s=round(canary.tok_s_mean, 2), reference_tok_s=None, verdict=unjudged)
    reference = _measure(inputs, reference_url, "reference")
    problems = judge(canary, reference, inputs.rollout)
    if problems:
        measurements = "; ".join(problems)
        raise CanaryRegressionError(
            f"The canary of fleet {inputs.stack} regressed: {measurements}. The roll stopped "
            "before the other hosts; the canary stays out of the router and the other replicas serve. "
            f"`sglang-stacks rollout {inputs.stack}` rolls it back by itself (fleet.rollout.on_regression: "
            f"roll_back); after a plain `pulumi up`, restore the previous stack file and run `pulumi up -s "
            f"{inputs.stack}`, which relaunches the canary on it. Or loosen fleet.rollout's tolerances.",
            measurements=measurements,
            stack=inputs.stack,
        )
    return CanaryOutputs(
        canary_tok_s=round(canary.tok_s_mean, 2),
        reference_tok_s=round(reference.tok_s_mean, 2),
        verdict="passed",
    )


class CanaryProvider(TypedProvider[CanaryInputs, CanaryOutputs]):
    """Judges each canary launch once."""

    inputs = CanaryInputs
    outputs = CanaryOutputs

    def resource_id(self, inputs: CanaryInputs, outputs: CanaryOutputs) -> str:
        return inputs.canary_instance

    def create_typed(self, inputs: CanaryInputs) -> CanaryOutputs:
        return run_gate(inputs)


class CanaryGate(dynamic.Resource, module="sglang", name="CanaryGate"):
    """The canary replica judged against a replica on the current configuration."""

    canary_tok_s: pulumi.Output[float]
    reference_tok_s: pulumi.Output[float | None]
    verdict: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        connection: pulumi.Input[Mapping[str, Any]],
        stack: str,
        python: str,
        canary_url: str,
        canary_instance: pulumi.Input[str],
        reference_url: str,
        workload: BenchmarkSpec,
        rollout: RolloutSpec,
        state_dir: str,
        router_url: pulumi.Input[str],
        config_digest: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        inputs = {
            "router_url": router_url,
            "config_digest": config_digest,
            "connection": connection,
            "stack": stack,
            "python": python,
            "canary_url": canary_url,
            "canary_instance": canary_instance,
            "reference_url": reference_url,
            "workload": workload.model_dump(mode="json"),
            "rollout": rollout.model_dump(mode="json"),
            "state_dir": state_dir,
        }
        super().__init__(
            CanaryProvider(), name, resource_props(inputs, CanaryOutputs), keep_connection_secret(opts)
        )
