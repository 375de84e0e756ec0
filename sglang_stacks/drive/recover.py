"""Pending operations: what an interrupted update left in a stack's state, and ``sglang-stacks
recover <stack>``, which clears the ones this tool knows are stale and says what to run for the rest.

Pulumi records an operation as pending while a provider works on it and drops it when the
provider answers. A killed CLI never hears the answer: the operation stays in the state, `pulumi
up` only warns about it (suggesting an interactive `pulumi refresh`), and a refresh run with
``--non-interactive`` keeps pending creates. Every create of this project's own resources is safe
to run again, so a pending one is stale once the host holds nothing it left: what one can leave is
a server process the claim records, or a router process its start recorded beside its log, that
no state tracks; such a process is stopped here first. Anything else (an interrupted update or
delete, another provider's create) is listed with the command that settles it.

The state is read and written with ``pulumi stack export``/``import`` through the Automation API. The
copy that is written back is the one exported without ``--show-secrets`` (secrets stay encrypted);
the decrypted copy, needed to reach the host, stays in memory.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pulumi.automation as auto
from pydantic import ValidationError

from sglang_stacks.drive.automation import pulumi_command, select_stack
from sglang_stacks.drive.state import ExportedState, Operation
from sglang_stacks.errors import ClaimError, HostError, RouterError, SpecError
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import find_project_dir

__all__ = ["Pending", "pending_operations", "recover", "warning"]

_DYNAMIC = "pulumi-python:dynamic/sglang:"
# Our resources whose create runs again safely: the environment and draft model reuse what is
# there, the probe only reads, the claim re-acquires, the benchmark stops a load generator left
# running before it starts one, the canary measures again, the router keeps one registration of a
# worker added twice. The server and the router are checked on their hosts.
_SAFE_CREATES = frozenset(
    _DYNAMIC + name
    for name in (
        "Server",
        "Router",
        "RouterWorker",
        "Benchmark",
        "PythonEnvironment",
        "DraftModel",
        "HostProbe",
        "GpuClaim",
        "CanaryGate",
    )
)
_SERVER, _ROUTER = _DYNAMIC + "Server", _DYNAMIC + "Router"
# How `pulumi stack export --show-secrets` marks a secret value (Pulumi's well-known signature).
_SECRET_SIG = "4dabf18193072939515e22adb298388d"


@dataclass(frozen=True)
class Pending:
    """One pending operation of a stack's state."""

    urn: str
    kind: str
    """What was interrupted: ``creating``, ``updating``, ``deleting``, ``reading`` or ``importing``."""
    type: str
    inputs: Mapping[str, Any]
    """The resource's inputs, secrets decrypted when the state was read with them (memory only)."""

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name} ({self.type.removeprefix('pulumi-python:dynamic/')})"


def _failed(stack: str, what: str, error: auto.CommandError) -> SpecError:
    """The sentence for a failed ``pulumi stack export``/``import``, with the fix."""
    said = str(error).strip()
    fix = (
        f"If no update of it runs any more (a killed `pulumi up`), `pulumi cancel -s {stack}` "
        "lets go of Pulumi's lock; then run this again."
        if "locked" in said
        else "Put the project's Pulumi CLI on PATH, select its backend and passphrase with "
        "`. scripts/env.sh`, and try again."
    )
    return SpecError(f"`pulumi {what}` of stack {stack!r} failed: {said}. {fix}")


def _plain(value: Any) -> Any:
    """A value of an exported state with its secrets decoded (exported with ``--show-secrets``)."""
    if isinstance(value, dict):
        if _SECRET_SIG in value:
            return _plain(json.loads(value["plaintext"])) if "plaintext" in value else None
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _export(target: auto.Stack, *, secrets: bool) -> dict[str, Any]:
    """The stack's state, read into memory as exported (the Automation API's ``export_stack`` has
    no ``--show-secrets``, and the decrypted copy must not reach a file)."""
    shown = ["--show-secrets"] if secrets else []
    try:
        done = pulumi_command(target, "stack", "export", "--stack", target.name, *shown)
    except auto.CommandError as error:
        raise _failed(target.name, "stack export", error) from None
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def _operations(document: Mapping[str, Any]) -> list[Operation]:
    return ExportedState.model_validate(document).operations


def pending_operations(stack: str, project_dir: Path | None = None) -> list[Pending]:
    """The pending operations of ``stack``'s state, secrets left encrypted."""
    target = select_stack(project_dir or find_project_dir(), stack)
    return [_pending(op) for op in _operations(_export(target, secrets=False))]


def _pending(op: Operation) -> Pending:
    resource = op.resource
    return Pending(urn=resource.urn, kind=op.type, type=resource.type, inputs=_plain(resource.inputs))


def warning(stack: str, pending: Sequence[Pending]) -> str:
    """What `rollout` says before updating a stack with pending operations."""
    listed = "; ".join(p.label for p in pending)
    return (
        f"stack {stack} has {len(pending)} pending operation(s) an interrupted update left ({listed}). "
        f"`sglang-stacks recover {stack}` clears those this tool knows are stale (stopping a server "
        "they left running) and says what to run for the rest."
    )


def _settle_server(pending: Pending, tracked: set[int]) -> str:
    """Stops the server an interrupted create launched, if it still runs untracked; says what was found."""
    from sglang_stacks.components.server import ServerInputs  # the providers, only for this command
    from sglang_stacks.hostops import claim, process

    inputs = ServerInputs.model_validate(dict(pending.inputs))
    conn = inputs.connection
    holder = claim.read(conn, state_dir=inputs.state_dir)
    if holder is None or holder.stack != inputs.stack:
        return f"{conn.label} runs no server of {inputs.stack} that the state does not know"
    if holder.updating:
        raise ClaimError(
            f"An update of stack {inputs.stack!r} is running on {conn.label} (since "
            f"{holder.updating_since}). Let it finish (or stop it), then run `sglang-stacks recover "
            f"{inputs.stack}` again."
        )
    pid, ticks = holder.server_pid, holder.server_start_ticks
    gone = ticks is not None and not process.is_running(conn, process.Running(pid or 0, ticks))
    if not pid or pid in tracked or gone:
        return f"{conn.label} runs no server of {inputs.stack} that the state does not know"
    process.stop_recorded(conn, holder, inputs.nvidia_smi, inputs.stop_timeout_s, inputs.state_dir)
    return f"the server it had launched on {conn.label} (pid {pid}) still ran, known to no state: stopped it"


def _settle_router(pending: Pending, tracked: set[int]) -> str:
    """Stops the router an interrupted create started, if it still runs untracked; says what was found."""
    from sglang_stacks.components.router import RouterInputs, leftover_router, stop_router

    inputs = RouterInputs.model_validate(dict(pending.inputs))
    where = f"{inputs.host}:{inputs.port} ({inputs.connection.label})"
    left = leftover_router(inputs)
    if left is None or left[0] in tracked:
        return f"{where} runs no router that the state does not know"
    stop_router(inputs, *left)
    return f"the router it had started on {where}, pid {left[0]}, still ran, known to no state: stopped it"


def _settle(pending: Pending, tracked: Mapping[str, set[int]]) -> str:
    """Makes a pending create of ours safe to run again; says what was found on the host.
    ``tracked``: the pids the state tracks, by resource type."""
    if pending.type == _SERVER:
        return _settle_server(pending, tracked[_SERVER])
    if pending.type == _ROUTER:
        return _settle_router(pending, tracked[_ROUTER])
    return "safe to run again"


def _remedy(stack: str, pending: Pending) -> str:
    """What the user runs for a pending operation this tool does not settle itself."""
    if pending.kind == "creating":
        return "check whether it created anything (this tool cannot tell for this kind) and remove it"
    return f"`pulumi refresh -s {stack}` reads it from its host"


def recover(stack: str, *, project_dir: Path | None = None, out: TextIO = sys.stdout) -> int:
    """Settles the pending operations of ``stack`` that this tool knows (stopping a server an
    interrupted create left running) and clears them, or, when others remain, prints the command
    for each: clearing only some is not possible, since ``pulumi stack import`` drops them all.
    Returns 0 when nothing pending remains, 1 when something is left for the user."""
    target = select_stack(project_dir or find_project_dir(), stack)
    encrypted = _export(target, secrets=False)
    if not _operations(encrypted):
        print(f"recover: stack {stack} has no pending operations; nothing to do.", file=out)
        return ExitCode.OK
    decrypted = ExportedState.model_validate(_plain(_export(target, secrets=True)))
    if [op.resource.urn for op in decrypted.operations] != [op.resource.urn for op in _operations(encrypted)]:
        raise SpecError(
            f"The state of stack {stack!r} changed while it was read: an update runs. Let it finish, "
            f"then run `sglang-stacks recover {stack}` again."
        )
    tracked = {kind: decrypted.tracked(kind) for kind in (_SERVER, _ROUTER)}
    stale, remaining = 0, 0
    print(f"recover: stack {stack} has pending operations an interrupted update left:", file=out)
    for op in decrypted.operations:
        pending = _pending(op)
        if pending.kind == "creating" and pending.type in _SAFE_CREATES:
            try:
                found = _settle(pending, tracked)
            except (HostError, RouterError, ValidationError) as error:
                if isinstance(error, ClaimError):
                    raise  # an update runs: nothing is settled now
                print(f"  {pending.label}: left for you: its host could not be checked: {error}", file=out)
                remaining += 1
                continue
            print(f"  {pending.label}: {found}; stale (the next `pulumi up` creates it).", file=out)
            stale += 1
        else:
            print(f"  {pending.label}: left for you: {_remedy(stack, pending)}.", file=out)
            remaining += 1
    if remaining:
        print(
            f"recover: {remaining} left for you (above); once they are settled, `pulumi refresh "
            f"--clear-pending-creates -s {stack}` clears every pending operation (the stale ones too).",
            file=out,
        )
        return ExitCode.LEFT_FOR_YOU
    # Importing the state as it is drops its pending operations: the supported way to clear them.
    try:  # the copy imported keeps its secrets encrypted
        target.import_stack(auto.Deployment(version=encrypted["version"], deployment=encrypted["deployment"]))
    except auto.CommandError as error:
        raise _failed(stack, "stack import", error) from None
    print(f"recover: cleared {stale}; nothing remains. `pulumi up -s {stack}` converges.", file=out)
    return ExitCode.OK
