"""A stack's benchmark on a cluster: the load generator's ConfigMap (and the ShareGPT sample's, with
``benchmark.dataset_path``), the Job that runs the load generator once against a URL, and the
`KubeBenchmark` that reads its document back. A one-node stack measures its server's pod; a fleet
measures its router.

The Job's pod writes the load generator's progress lines to its log (stderr), which
``sglang-stacks logs`` shows as sentences; its document is the log's last line.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from sglang_stacks.config.spec import StackSpec
from sglang_stacks.kube import dataset
from sglang_stacks.kube.benchmark import KubeBenchmark, KubeBenchmarkArgs
from sglang_stacks.kube.client import ClusterAccess
from sglang_stacks.kube.workloads import MANAGED_BY, SERVER_POD_LABEL, SKIP_AWAIT, STACK_LABEL

__all__ = ["LOADGEN_DIR", "BenchmarkFiles", "benchmark_files", "benchmark_job", "measure"]

LOADGEN_DIR = "/opt/sglang-stacks"
"""Where the benchmark's pod finds the load generator's package (``loadgen/`` below it)."""


def benchmark_labels(stack: str) -> dict[str, str]:
    """The labels of a stack's benchmark objects and pods."""
    return {**MANAGED_BY, "app.kubernetes.io/name": "sglang-benchmark", STACK_LABEL: stack}


@dataclass(frozen=True)
class BenchmarkFiles:
    """The ConfigMaps a stack's benchmark Jobs mount, by name."""

    loadgen: pulumi.Output[str]
    dataset: pulumi.Output[str] | None = None


def benchmark_files(name: str, stack: str, spec: StackSpec, opts: pulumi.ResourceOptions) -> BenchmarkFiles:
    """The load generator's source files (one key each, mounted as ``loadgen/``) and, with
    ``benchmark.dataset_path``, the ShareGPT sample the runs draw from (`kube.dataset`)."""
    import sglang_loadgen as loadgen

    labels = benchmark_labels(stack)
    meta = k8s.meta.v1.ObjectMetaArgs(labels=labels)
    source = k8s.core.v1.ConfigMap(
        f"{name}-loadgen",
        k8s.core.v1.ConfigMapInitArgs(metadata=meta, data=loadgen.source_files()),
        opts=opts,
    )
    found: pulumi.Output[str] | None = None
    if spec.benchmark.dataset_path:
        sample = dataset.sharegpt_sample(spec.benchmark.dataset_path, spec.benchmark.seed)
        data = {dataset.DATASET_FILE: base64.b64encode(sample).decode()}
        found = k8s.core.v1.ConfigMap(
            f"{name}-dataset", k8s.core.v1.ConfigMapInitArgs(metadata=meta, binary_data=data), opts=opts
        ).metadata.name
    return BenchmarkFiles(source.metadata.name, found)


def benchmark_job(
    *,
    image: str,
    pull_policy: str,
    command: pulumi.Input[Sequence[str]],
    files: BenchmarkFiles,
    node_selector: Mapping[str, str],
    labels: Mapping[str, str],
    pod_labels: pulumi.Input[Mapping[str, str]],
    timeout_s: float,
) -> k8s.batch.v1.JobInitArgs:
    """The benchmark: one pod on the host's network running ``command`` (the image's Python with the
    load generator, ``python3 -m loadgen <workload>``) once (no retries: a failed measurement is
    reported, not repeated), its document printed to its log."""
    mounts = [
        k8s.core.v1.VolumeMountArgs(name="loadgen", mount_path=f"{LOADGEN_DIR}/loadgen", read_only=True)
    ]
    volumes = [
        k8s.core.v1.VolumeArgs(
            name="loadgen", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=files.loadgen)
        )
    ]
    if files.dataset is not None:
        mounts.append(
            k8s.core.v1.VolumeMountArgs(name="dataset", mount_path=dataset.DATASET_DIR, read_only=True)
        )
        volumes.append(
            k8s.core.v1.VolumeArgs(
                name="dataset", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=files.dataset)
            )
        )
    container = k8s.core.v1.ContainerArgs(
        name="loadgen",
        image=image,
        image_pull_policy=pull_policy,
        command=command,
        working_dir=LOADGEN_DIR,
        volume_mounts=mounts,
    )
    return k8s.batch.v1.JobInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=dict(labels), annotations=SKIP_AWAIT),
        spec=k8s.batch.v1.JobSpecArgs(
            backoff_limit=0,
            active_deadline_seconds=int(timeout_s),
            # The pod's labels name what it measures: another server pod is a new template, which
            # Kubernetes cannot change in a Job, so a new Job that measures it.
            template=k8s.core.v1.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels=pod_labels),
                spec=k8s.core.v1.PodSpecArgs(
                    host_network=True,
                    dns_policy="ClusterFirstWithHostNet",
                    restart_policy="Never",
                    node_selector=dict(node_selector) or None,
                    containers=[container],
                    volumes=volumes,
                ),
            ),
        ),
    )


@dataclass(frozen=True)
class Measured:
    """What a benchmark Job measures and what the history records beside its numbers."""

    url: pulumi.Output[str]
    """The server's (or the router's) address as the Job's pod reaches it."""
    instance: pulumi.Output[str]
    """What is measured, as a label value (a server pod's uid): another value is a new measurement."""
    launch_command: pulumi.Input[str]
    flags_digest: str
    gpus: int
    """The GPUs measured, for the cost per million tokens."""


def measure(
    name: str,
    *,
    stack: str,
    spec: StackSpec,
    access: ClusterAccess,
    files: BenchmarkFiles,
    measured: Measured,
    parent: pulumi.Resource,
    child: pulumi.ResourceOptions,
    after: Sequence[pulumi.Resource],
) -> KubeBenchmark:
    """The Job that runs the stack's benchmark against ``measured`` once ``after`` is done, and its
    result (``<name>-job`` and ``<name>``)."""
    import sglang_loadgen as loadgen
    from sglang_loadgen.contract import Workload

    cluster = spec.host.cluster
    assert cluster is not None  # a kubernetes host has a cluster section
    labels = benchmark_labels(stack)
    settings = spec.benchmark.settings()
    settings["progress_file"] = "/dev/stderr"  # the pod's log: `sglang-stacks logs` shows it
    if files.dataset is not None:
        settings["dataset_path"] = f"{dataset.DATASET_DIR}/{dataset.DATASET_FILE}"

    def command(url: str) -> list[str]:
        return [cluster.python, "-m", loadgen.PACKAGE_NAME, *Workload.from_settings(url, settings).argv()]

    job = k8s.batch.v1.Job(
        f"{name}-job",
        benchmark_job(
            image=cluster.image,
            pull_policy=cluster.image_pull_policy,
            command=measured.url.apply(command),
            files=files,
            node_selector=cluster.selector(),
            labels=labels,
            pod_labels=measured.instance.apply(lambda instance: {**labels, SERVER_POD_LABEL: instance}),
            timeout_s=spec.benchmark.timeout_s,
        ),
        opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(after))),
    )
    return KubeBenchmark(
        name,
        KubeBenchmarkArgs(
            access=access,
            stack=stack,
            job=job.metadata.name,
            server_instance=measured.instance,
            workload=spec.benchmark,
            launch_command=measured.launch_command,
            sglang_version=spec.environment.sglang_release,
            flags_digest=measured.flags_digest,
            gate=spec.gate,
            gpu_hour_price=spec.host.gpu_hour_price,
            gpu_count=measured.gpus,
        ),
        pulumi.ResourceOptions(parent=parent, depends_on=[job]),
    )
