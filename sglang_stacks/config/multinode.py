"""A server over several hosts, as SGLang runs one: the same launch command on every node plus
``--nnodes N --node-rank R --dist-init-addr <rank 0's host>:<port>``; ``--tp-size`` is the total.

The stack declares ``fleet.nodes_per_replica``; this module derives each node's flags and the
network variables NCCL and Gloo read, and says what a stack may not declare itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_stacks.config.fleet import FleetSpec

__all__ = ["NODE_FLAGS", "SOCKET_IFNAME_VARIABLES", "NodePlace", "node_place", "problems", "socket_env"]

NODE_FLAGS = ("nnodes", "node_rank", "dist_init_addr")
"""The launch flags the fleet sets per node."""

SOCKET_IFNAME_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
"""What names the interface between nodes: NCCL for the all-reduces, Gloo for torch's CPU group."""


@dataclass(frozen=True)
class NodePlace:
    """Where one host stands in its multi-node server."""

    replica: int
    node_rank: int
    nnodes: int
    dist_init_addr: str
    """``HOST:PORT`` of the replica's rank 0 rendezvous."""
    rank0_host: int
    """The index (in ``fleet.hosts``) of the replica's rank 0 host."""

    def flags(self) -> dict[str, int | str]:
        """The node's own launch flags."""
        return {"nnodes": self.nnodes, "node_rank": self.node_rank, "dist_init_addr": self.dist_init_addr}


def node_place(fleet: FleetSpec, host: int) -> NodePlace | None:
    """Host ``host``'s place in its server; None when each replica is one host."""
    nodes = fleet.nodes_per_replica
    if nodes == 1:
        return None
    replica, rank = divmod(host, nodes)
    rank0 = fleet.hosts[replica * nodes]
    address = rank0.node_address or rank0.worker_address
    return NodePlace(replica, rank, nodes, f"{address}:{fleet.dist_init_port + replica}", replica * nodes)


def socket_env(fleet: FleetSpec) -> dict[str, str]:
    """``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` for every node, when the fleet names one."""
    if fleet.nodes_per_replica == 1 or fleet.socket_ifname is None:
        return {}
    return dict.fromkeys(SOCKET_IFNAME_VARIABLES, fleet.socket_ifname)


def problems(fleet: FleetSpec | None, tp_size: int, declared: dict[str, object]) -> list[str]:
    """What is wrong with a stack's multi-node settings, each a sentence naming the key and the fix.

    ``declared`` holds the node flags the stack's server section sets itself.
    """
    found = []
    own = sorted(name for name, value in declared.items() if value is not None)
    if own:
        found.append(
            f"server.{own[0]} is set in the stack file, but the node flags ({', '.join(NODE_FLAGS)}) are "
            "set per host by sglang-stacks; remove them and declare fleet.nodes_per_replica with the hosts "
            "in fleet.hosts"
        )
    nodes = fleet.nodes_per_replica if fleet is not None else 1
    if nodes > 1 and tp_size % nodes:
        found.append(
            f"server.tp_size {tp_size} does not split over fleet.nodes_per_replica {nodes}: every node runs "
            f"the same number of tensor-parallel ranks; set tp_size to a multiple of {nodes} (like "
            f"{nodes * max(tp_size // nodes, 1)})"
        )
    return found
