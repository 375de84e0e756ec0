"""The other nodes of a multi-node server, as a node's refresh sees them: SGLang's group only runs
whole, so a node whose peer is gone is gone too."""

from __future__ import annotations

from sglang_stacks.hostops import claim, process
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.resources.provider import Props

__all__ = ["GroupMember", "member_runs"]


class GroupMember(Props):
    """Another node of a multi-node server, as a refresh of this node reaches it."""

    connection: Connection
    """How to reach that node's host (a secret: it may hold the SSH key)."""
    state_dir: str
    """The host's folder of sglang-stacks state, where its claim records the node's process."""
    node_rank: int


def member_runs(member: GroupMember, stack: str) -> bool:
    """Whether the node on ``member``'s host still runs: its claim is this stack's and records a
    live server process."""
    recorded = claim.read(member.connection, state_dir=member.state_dir)
    if recorded is None or recorded.stack != stack or not recorded.server_pid:
        return False
    running = process.Running(recorded.server_pid, recorded.server_start_ticks or 0)
    return process.is_running(member.connection, running)
