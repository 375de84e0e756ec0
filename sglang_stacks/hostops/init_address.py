"""A multi-node server's init address, checked from its hosts before any GPU is claimed: it must
be an address of rank 0's host, and every other node must reach it. The host side is
``programs/init_address_probe.py``."""

from __future__ import annotations

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.runner import run_python

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
    mode = "host" if node_rank == 0 else "join"
    result = run_python(conn, "init_address_probe.py", [mode, host, port], python=None, timeout_s=60)
    verdict = result.stdout.strip()
    word, _, reason = verdict.partition(" ")
    if not result.ok or not word:
        raise HostError(
            f"Could not check the init address {address} on {conn.label}: "
            f"{result.stderr.strip() or 'no answer'}. Check that the host has python3."
        )
    # A port in use on rank 0's host may be held by the server a takeover is about to stop; if it
    # stays taken, SGLang's own bind error says so.
    if word in ("free", "reachable", "in-use"):
        return verdict
    if node_rank == 0:
        raise HostError(
            f"Node rank 0 ({conn.label}) cannot host the multi-node server's rendezvous at {address}: "
            f"{reason} ({word}). {_FIX_HOST}"
        )
    raise HostError(
        f"Node rank {node_rank} ({conn.label}) cannot reach the init address {address} of node rank 0: "
        f"{reason} ({word}); SGLang's process group would never form. {_FIX_JOIN}"
    )
