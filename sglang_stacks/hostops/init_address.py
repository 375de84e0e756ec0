"""A multi-node server's init address, checked from its hosts before any GPU is claimed: it must
be an address of rank 0's host, and every other node must reach it. The host side is
``programs/init_address_probe.py``."""

from __future__ import annotations

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.init_address_probe_contract import Join, Listen
from sglang_stacks.hostops.programs.runner import call

__all__ = ["check_init_address"]

_FIX_JOIN = (
    "Open the port between the hosts (a firewall may drop it), or set fleet.hosts[i].node_address of "
    "rank 0's host to its address on the network the nodes share."
)
_FIX_HOST = "Set fleet.hosts[i].node_address of rank 0's host to one of that host's own addresses."


def check_init_address(conn: Connection, address: str, node_rank: int) -> str:
    """The verdict for ``address`` (``HOST:PORT``) from the host of node ``node_rank``; HostError,
    naming the keys to fix, when rank 0 cannot listen there or another node cannot reach it."""
    host, _, port = address.rpartition(":")
    check = Listen if node_rank == 0 else Join
    found = call(conn, check(host=host, port=int(port)))
    if found.usable:
        return str(found)
    if node_rank == 0:
        raise HostError(
            f"Node rank 0 ({conn.label}) cannot host the multi-node server's rendezvous at {address}: "
            f"{found.reason} ({found.verdict}). {_FIX_HOST}"
        )
    raise HostError(
        f"Node rank {node_rank} ({conn.label}) cannot reach the init address {address} of node rank 0: "
        f"{found.reason} ({found.verdict}); SGLang's process group would never form. {_FIX_JOIN}"
    )
