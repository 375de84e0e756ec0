"""One replica of a fleet on a cluster: its launch, its server pod's wait, its own benchmark (none
for a prefill or decode worker) and its registration with the router, and what the fleet's outputs
say about it."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from sglang_stacks.components.benchmark import Benchmark, replica_outputs
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
        """What the fleet's outputs say about this replica."""
        url = self.server.output(lambda o: o.url)
        return replica_outputs(self.index, url, self.launch.command, self.benchmark, self.role)
