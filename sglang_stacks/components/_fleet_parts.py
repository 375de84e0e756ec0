"""A fleet's replica: its resources (its server, its own benchmark, its place in the router) and
what the fleet's outputs say about it."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from sglang_stacks.components.benchmark import Benchmark
from sglang_stacks.components.router import RouterWorker
from sglang_stacks.components.server import SGLangServer
from sglang_stacks.config.disaggregation import Role
from sglang_stacks.results.outputs import ReplicaOutputs

__all__ = ["Replica"]


@dataclass
class Replica:
    """One host's resources."""

    index: int
    server: SGLangServer
    benchmark: Benchmark | None
    """Its own benchmark; none for a prefill or decode worker, which serves only in a pair, and in
    a fleet measured through its router only (``fleet.benchmark_replicas: false``)."""
    worker: RouterWorker
    url: str
    role: Role | None = None

    def outputs(self) -> pulumi.Output[ReplicaOutputs]:
        """What the fleet's outputs say about this replica."""
        tok_s = (
            self.benchmark.output(lambda o: o.levels).apply(lambda levels: levels[0].tok_s_mean)
            if self.benchmark is not None
            else None
        )
        return pulumi.Output.all(self.server.output(lambda o: o.launch_command), tok_s).apply(
            lambda found: ReplicaOutputs(
                host=self.index, url=self.url, launch_command=found[0], tok_s=found[1], role=self.role
            )
        )
