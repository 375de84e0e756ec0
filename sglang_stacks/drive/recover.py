"""Pending operations: what an interrupted update left in a stack's state, and ``sglang-stacks
recover <stack>``, the one command that brings the stack back after a killed `pulumi up`.

Pulumi records an operation as pending while a provider works on it and drops it when the
provider answers. A killed CLI never hears the answer: the operation stays in the state, and so
does the killed update's lock. `pulumi up` keeps pending operations without a word (each killed
update adds its own), and a refresh run with ``--non-interactive`` keeps pending creates.

Every operation of this project's own resources runs again safely, so recover settles them all:
it lets go of the dead update's lock (only once no process of that update runs), finds what each
interrupted create left on its host (a server the claim records, or a router whose start recorded
its pid beside its log, that no state tracks: `drive.leftovers`), clears the pending operations,
and then stops those processes. A server the state tracks serves on. Another provider's
operation is listed with the command that settles it, and then nothing is cleared.

The state is read and written with ``pulumi stack export``/``import`` through the Automation API. The
copy that is written back is the one exported without ``--show-secrets`` (secrets stay encrypted);
the decrypted copy, needed to reach the host, stays in memory.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pulumi.automation as auto
from pydantic import ValidationError

from sglang_stacks.drive import leftovers
from sglang_stacks.drive.automation import cancel_dead_lock, pulumi_command, select_stack
from sglang_stacks.drive.leftovers import Leftover
from sglang_stacks.errors import ClaimError, HostError, RouterError, SpecError
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import find_project_dir
from sglang_stacks.resources.state import ExportedState, Operation

__all__ = ["Pending", "pending_operations", "recover"]

_DYNAMIC = "pulumi-python:dynamic/sglang:"
# This project's resources. Each of their operations runs again safely: a create reuses what is
# there (the environment, the draft model), only reads (the probe), re-acquires (the claim), stops
# a load generator left running before it starts one (the benchmark), measures again (the canary),
# keeps one registration of a worker added twice (the router); an update converges to its inputs
# from the outputs the state kept; a delete of something already gone does nothing. What a create
# can leave that no state knows is a process: a server or a router, looked for on their hosts.
_OURS = frozenset(
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
        "InitAddressCheck",
    )
)
_SERVER, _ROUTER = _DYNAMIC + "Server", _DYNAMIC + "Router"
# What clearing each kind of pending operation of ours means (this program never reads or imports).
_SETTLED = {
    "creating": "safe to run again (the next `pulumi up` creates it)",
    "updating": "the state keeps it as it was, and the next `pulumi up` updates it again",
    "deleting": "the state keeps it, and the next `pulumi up` (or `pulumi destroy`) deletes it again",
}
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
        "An update of it started meanwhile: let it finish, then run this again."
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
    """The stack's state, read into memory as exported, with its secrets decrypted or not: the
    workspace's ``export_stack`` never decrypts, and the decrypted copy must not reach a file."""
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


def _remedy(stack: str, pending: Pending) -> str:
    """What the user runs for a pending operation this tool does not settle itself."""
    if pending.kind == "creating":
        return "check whether it created anything (this tool cannot tell for this kind) and remove it"
    return f"`pulumi refresh -s {stack}` reads it from its host"


def _settle(pending: Pending, tracked: Mapping[str, set[int]]) -> Leftover:
    """What an interrupted operation of ours left on its host: for a create of a server or a router,
    its process if no state tracks it; for anything else nothing (the state keeps what an update or
    a delete worked on, and each runs again safely)."""
    if pending.kind == "creating" and pending.type == _SERVER:
        return leftovers.find_server(pending.inputs, tracked[_SERVER])
    if pending.kind == "creating" and pending.type == _ROUTER:
        return leftovers.find_router(pending.inputs, tracked[_ROUTER])
    return Leftover("")


def _read_settled(stack: str, state: ExportedState, out: TextIO) -> list[Leftover] | None:
    """What each pending operation of ``state`` left on its host, printed; None when one of them is
    left for the user (printed with its command). ClaimError when an update holds a host."""
    tracked = {kind: state.tracked(kind) for kind in (_SERVER, _ROUTER)}
    found: list[Leftover] = []
    remaining = 0
    print(f"recover: stack {stack} has pending operations an interrupted update left:", file=out)
    for op in state.operations:
        pending = _pending(op)
        if pending.type not in _OURS or pending.kind not in _SETTLED:
            print(f"  {pending.label}: left for you: {_remedy(stack, pending)}.", file=out)
            remaining += 1
            continue
        try:
            leftover = _settle(pending, tracked)
        except (HostError, RouterError, ValidationError) as error:
            if isinstance(error, ClaimError):
                raise  # an update runs: nothing is settled now
            print(f"  {pending.label}: left for you: its host could not be checked: {error}", file=out)
            remaining += 1
            continue
        said = f"{leftover.found}; " if leftover.found else ""
        print(f"  {pending.label}: {said}{_SETTLED[pending.kind]}.", file=out)
        found.append(leftover)
    if remaining:
        print(
            f"recover: {remaining} left for you (above); nothing was cleared or stopped. Once they are "
            f"settled, `pulumi refresh --clear-pending-creates -s {stack}` clears every pending operation.",
            file=out,
        )
        return None
    return found


def recover(stack: str, *, project_dir: Path | None = None, out: TextIO = sys.stdout) -> int:
    """Brings ``stack`` back from an interrupted update: lets go of Pulumi's lock of the dead update
    (only once no process of it runs: `automation.cancel_dead_lock`), finds what each pending
    operation left on its host, clears the pending operations (an import of the state as it is),
    then stops the processes interrupted creates left that no state tracks; a server the state
    tracks serves on. When an operation is not one this tool can settle, it prints the command for
    each and clears nothing, since ``pulumi stack import`` drops them all. Returns 0 when nothing
    pending remains, 1 when something is left for the user; StacksError when an update of the
    stack still runs."""
    target = select_stack(project_dir or find_project_dir(), stack)
    cancelled = cancel_dead_lock(target)
    if cancelled:
        print(f"recover: {cancelled}.", file=out)
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
    found = _read_settled(stack, decrypted, out)
    if found is None:
        return ExitCode.LEFT_FOR_YOU
    # Importing the state as it is drops its pending operations: the supported way to clear them.
    try:  # the copy imported keeps its secrets encrypted
        target.import_stack(auto.Deployment(version=encrypted["version"], deployment=encrypted["deployment"]))
    except auto.CommandError as error:
        raise _failed(stack, "stack import", error) from None
    print(f"recover: cleared {len(found)} pending operation(s).", file=out)
    stopped = True
    for leftover in found:
        if leftover.stop is None:
            continue
        try:
            print(f"recover: {leftover.stop()}.", file=out)
        except (HostError, RouterError) as error:
            said = f"{leftover.found}; stopping it failed: {error} {leftover.if_not_stopped}"
            print(f"recover: {said}", file=out)
            stopped = False
    if not stopped:
        return ExitCode.LEFT_FOR_YOU
    print(f"recover: nothing remains; `pulumi up -s {stack}` converges.", file=out)
    return ExitCode.OK
