"""What a preview of a fleet on a cluster says besides the per-resource diff: the order a change would
roll in (batch by batch, the canary first) and, per replica, how its launch flags would change from
what its Deployment serves now (the note its ``sglang-stacks.io/serving`` annotation holds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import StacksError
from sglang_stacks.hostops import serving
from sglang_stacks.kube.claim import ServerObject, server_objects
from sglang_stacks.kube.client import ClusterAccess
from sglang_stacks.kube.launch import ServerLaunch

__all__ = ["announce", "rollout_order"]


def _replica_line(index: int, launch: ServerLaunch, found: ServerObject | None, release: str) -> str:
    where = f"replica {index} (Deployment/{launch.name}, port {launch.port})"
    if found is None or found.note is None:
        return f"{where}: not deployed; its pod would start"
    current = found.note
    changes = serving.changes_from(current, launch.flags, release)
    if current.release != release:
        changes.insert(0, f"~ release {current.release} => {release}")
    if found.replicas == 0:
        changes.insert(0, "(scaled to no pod: another stack took the namespace; its pod would start again)")
    if not changes:
        return f"{where}: unchanged"
    return f"{where}:\n" + "\n".join(f"        {line}" for line in changes)


def rollout_order(
    spec: StackSpec, stack: str, launches: Sequence[ServerLaunch], objects: Mapping[str, ServerObject]
) -> str:
    """The preview's sentence: batch by batch, each replica and what changes on it, given the
    namespace's server ``objects`` by name."""
    assert spec.fleet is not None
    rollout, release = spec.fleet.rollout, spec.environment.sglang_release
    lines = [
        f"Fleet {stack} rolls a change {rollout.batch_size} replica(s) at a time, each batch after the "
        "previous one is back in the router:"
    ]
    batches = spec.fleet.batches()
    for number, batch in enumerate(batches, start=1):
        canary = ""
        if number == 1 and rollout.canary and len(batches) > 1:
            canary = (
                f" (canary: replica {batch[0]} is benchmarked beside another replica of the router, which "
                "leaves the router for that benchmark, and judged before the rest proceeds)"
            )
        lines.append(f"  batch {number}{canary}:")
        lines += [
            f"    {_replica_line(i, launches[i], objects.get(launches[i].name), release)}" for i in batch
        ]
    return "\n".join(lines)


def announce(
    parent: pulumi.Resource,
    access: ClusterAccess,
    spec: StackSpec,
    stack: str,
    launches: Sequence[ServerLaunch],
) -> None:
    """Logs the rollout order on ``parent`` (previews only)."""
    try:
        objects = {obj.name: obj for obj in server_objects(access)}
    except StacksError:
        return  # an unreachable cluster already failed preflight's read, with its own message
    pulumi.log.info(rollout_order(spec, stack, launches, objects), parent)
