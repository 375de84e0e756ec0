"""What a preview of a fleet says besides the per-resource diff: the order the change would roll
in (batch by batch, the canary first) and, per host, how its launch flags would change from what
the host serves now (its serving note, read over its connection as the single-host preview does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi

from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import StacksError
from sglang_stacks.hostops import serving
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.resources.wiring import launch_flags, served_now


def _host_line(index: int, fields: Mapping[str, Any], spec: StackSpec, stack: str) -> str:
    """``host 1 (user@addr:22, state_dir): <what changes>``, the changes indented below it."""
    host = spec.for_host(index)
    release = host.environment.sglang_release
    try:
        conn = Connection(**fields)
        role = spec.fleet.roles()[index] if spec.fleet is not None else None
        where = f"host {index} ({f'{role} worker, ' if role else ''}{conn.label}, {host.host.state_dir})"
        current = served_now(conn, host.host.state_dir, release)
    except StacksError:
        return f"host {index}: unreachable now (its probe will say why)"
    if current is None:
        return f"{where}: serves nothing of sglang-stacks; a replica of {stack} would start"
    changes = serving.changes_from(current, launch_flags(host), release)
    if current.release != release:
        changes.insert(0, f"~ release {current.release} => {release}")
    if not changes:
        return f"{where}: unchanged (serves {current.stack} with the same launch flags)"
    return f"{where}:\n" + "\n".join(f"        {line}" for line in changes)


def rollout_order(spec: StackSpec, stack: str, connections: Sequence[Mapping[str, Any]]) -> str:
    """The preview's sentence: batch by batch, each host and what changes on it."""
    assert spec.fleet is not None
    rollout = spec.fleet.rollout
    lines = [
        f"Fleet {stack} rolls a change {rollout.batch_size} replica(s) at a time, each batch after the "
        "previous one is back in the router:"
    ]
    batches = spec.fleet.batches()
    for number, batch in enumerate(batches, start=1):
        canary = ""
        if number == 1 and rollout.canary and len(batches) > 1:
            judged, beside = spec.fleet.replica_hosts(batch[0])[0], spec.fleet.replica_hosts(batches[1][0])[0]
            canary = (
                f" (canary: host {judged} is benchmarked beside host {beside}, which leaves the router "
                "for that benchmark, and judged before the rest proceeds)"
            )
        lines.append(f"  batch {number}{canary}:")
        # A multi-node replica lists each of its hosts (nodes).
        hosts = [host for replica in batch for host in spec.fleet.replica_hosts(replica)]
        lines += [f"    {_host_line(i, connections[i], spec, stack)}" for i in hosts]
    return "\n".join(lines)


def announce(
    parent: pulumi.Resource, spec: StackSpec, stack: str, connections: Sequence[pulumi.Output[Any]]
) -> None:
    """Logs the rollout order on ``parent`` once every host's connection is known (previews only)."""
    pulumi.Output.all(*connections).apply(
        lambda fields: pulumi.log.info(rollout_order(spec, stack, fields), parent)
    )
