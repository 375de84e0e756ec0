"""KubeBenchmark: the benchmark Job's result, read back into the project's typed results.

The Job (pulumi-kubernetes's) runs the load generator once against the server; this resource waits
for it, reads the document the load generator printed (its pod's log) into the load generator's own
`Document`, and records it as every benchmark is recorded (`results.measurement`: the per-level
results, the history, the regression gate). So ``tok_s`` is a stack output and ``compare``, gates,
history and campaigns read a cluster's results as they read an SSH host's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import pulumi

from sglang_loadgen.progress import LINE_PREFIX
from sglang_stacks.errors import BenchmarkError, HostError
from sglang_stacks.kube import pods
from sglang_stacks.kube.client import ClusterAccess, api_error_text
from sglang_stacks.resources.benchmark_shape import BenchmarkOutputs, MeasurementInputs
from sglang_stacks.resources.provider import LABEL, REPLACES, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for

if TYPE_CHECKING:
    from sglang_loadgen.document import Document

__all__ = ["KubeBenchmark", "KubeBenchmarkArgs", "KubeBenchmarkInputs"]

_POLL_S = 1.0
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


class KubeBenchmarkInputs(MeasurementInputs):
    """The Job measured and what the history records beside its numbers."""

    access: Annotated[ClusterAccess, LABEL]
    job: Annotated[str, REPLACES]
    """The benchmark Job's name: a new Job (a new server launch, another workload) is a new measurement."""


def _job_state(access: ClusterAccess, job: str) -> str:
    """``running``, ``succeeded`` or ``failed``."""
    try:
        status = access.batch().read_namespaced_job_status(job, access.namespace, _request_timeout=30).status
    except Exception as error:
        raise HostError(
            f"{access.label} did not answer about the benchmark Job {job} ({api_error_text(error)}). Once it "
            "answers, `pulumi up` waits for the Job again."
        ) from None
    if status.succeeded:
        return "succeeded"
    return "failed" if status.failed else "running"


def _job_pod(access: ClusterAccess, job: str) -> str | None:
    found = access.core().list_namespaced_pod(
        access.namespace, label_selector=f"{JOB_NAME_LABEL}={job}", _request_timeout=30
    )
    return found.items[0].metadata.name if found.items else None


def job_document(inputs: KubeBenchmarkInputs) -> Document:
    """Waits for the Job and reads the load generator's document from its pod's log; BenchmarkError
    with the log's last lines when it failed or printed no document."""
    from sglang_stacks.results.summary import read_document

    access, job = inputs.access, inputs.job
    deadline = time.monotonic() + inputs.workload.timeout_s + 60
    state = _job_state(access, job)
    while state == "running" and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        state = _job_state(access, job)
    pod = _job_pod(access, job)
    log = pods.pod_log(access, pod) if pod else ""
    lines = [line for line in log.splitlines() if line.strip()]
    # Its progress lines come first, in the same log; the document is the last line.
    documents = [line for line in lines if line.startswith("{") and not line.startswith(LINE_PREFIX)]
    if state != "succeeded" or not documents:
        shown = "\n".join(lines[-20:]) or "(no log)"
        why = "did not finish in time" if state == "running" else f"ended {state}"
        raise BenchmarkError(
            f"The benchmark Job {access.namespace}/{job} {why}; its pod's last log lines:\n{shown}\n"
            f"Check that the server still serves (`pulumi refresh -s {inputs.stack}`) and that the workload "
            "fits its limits; nothing was recorded."
        )
    return read_document(documents[-1])


def measure(inputs: KubeBenchmarkInputs) -> BenchmarkOutputs:
    """Reads the Job's document, records it in the history, judges the gate, returns the outputs."""
    from sglang_stacks.results import measurement

    document = job_document(inputs)
    failed = [level for level in document.levels if level.errors]
    if failed:
        first = failed[0]
        raise BenchmarkError(
            f"{first.errors} of {first.requests} measured requests failed at {first.name} (first: "
            f"{first.error_samples[0]}); tok/s would count them as no tokens, so nothing was recorded. The "
            f"server's log (`kubectl logs`) says why; fix that and run `pulumi up -s {inputs.stack}`."
        )
    measured = measurement.Measured(
        inputs.stack, inputs.flags_digest, inputs.sglang_version, inputs.launch_command
    )
    price = inputs.gpu_hour_price * inputs.gpu_count if inputs.gpu_hour_price else None
    levels = measurement.record(
        measured, document, slo=inputs.workload.slo, host_price_per_hour=price, gate=inputs.gate
    )
    return BenchmarkOutputs(levels=list(levels))


class KubeBenchmarkProvider(TypedProvider[KubeBenchmarkInputs, BenchmarkOutputs]):
    """Measures once per Job; re-judges the kept result when only the gate or the price changes."""

    inputs = KubeBenchmarkInputs
    outputs = BenchmarkOutputs

    def resource_id(self, inputs: KubeBenchmarkInputs, outputs: BenchmarkOutputs) -> str:
        return inputs.job

    def create_typed(self, inputs: KubeBenchmarkInputs) -> BenchmarkOutputs:
        return measure(inputs)

    def update_typed(
        self, olds: BenchmarkOutputs, old_inputs: KubeBenchmarkInputs, news: KubeBenchmarkInputs
    ) -> BenchmarkOutputs:
        from sglang_stacks.results import measurement

        price = news.gpu_hour_price * news.gpu_count if news.gpu_hour_price else None
        levels = measurement.rejudge(news.stack, olds.levels, host_price_per_hour=price, gate=news.gate)
        return BenchmarkOutputs(levels=list(levels))


KubeBenchmarkArgs = args_for(KubeBenchmarkInputs)
"""`KubeBenchmark`'s arguments: the fields of `KubeBenchmarkInputs`, each a value or an Output of one."""


class KubeBenchmark(
    TypedResource[KubeBenchmarkInputs, BenchmarkOutputs], module="sglang", name="KubeBenchmark"
):
    """The result of one benchmark Job; its outputs are `BenchmarkOutputs`."""

    def __init__(
        self, name: str, args: Args[KubeBenchmarkInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(KubeBenchmarkProvider(), name, args, opts)
