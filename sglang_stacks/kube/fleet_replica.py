"""One replica of a fleet on a cluster: its launch, its server pod's wait, its own benchmark (none
for a prefill or decode worker) and its registration with the router, and what the fleet's outputs
say about it."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from sglang_stacks.components.benchmark import Benchmark
from sglang_stacks.components.router import RouterWorker
from sglang_stacks.config.disaggregation import Role
from sglang_stacks.kube.launch import ServerLaunch
from sglang_stacks.kube.server import KubeServer
from sglang_stacks.results.outputs import ReplicaOutputs

__all__ = ["KubeReplica"]


@dataclass(frozen=True)
class KubeReplica:
    """One replica's resources."""

    index: int
    launch: ServerLaunch
    server: KubeServer
    benchmark: Benchmark | None
    """Its own benchmark; none for a prefill or decode worker, which serves only in a pair."""
    worker: RouterWorker
    role: Role | None = None

    def outputs(self) -> pulumi.Output[ReplicaOutputs]:
        tok_s = (
            self.benchmark.output(lambda o: o.levels).apply(lambda levels: levels[0].tok_s_mean)
            if self.benchmark is not None
            else None
        )
        return pulumi.Output.all(self.server.output(lambda o: o.url), tok_s).apply(
            lambda found: ReplicaOutputs(
                host=self.index,
                url=found[0],
                launch_command=self.launch.command,
                tok_s=found[1],
                role=self.role,
            )
        )
