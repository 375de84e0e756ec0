"""Pulumi's exported state (``pulumi stack export``), read into models of the parts this tool reads:
its resources with their inputs and outputs, its pending operations. Pulumi's format, not ours:
fields the models do not name pass unread. Also what a program reads of its own stack's pending
operations, from a local backend's state file (`local_pending`), and the sentence that warns of them.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from pydantic import ConfigDict, Field, ValidationError

from sglang_stacks.shape import Shape

if TYPE_CHECKING:
    from pulumi import automation as auto

__all__ = [
    "ExportedState",
    "Operation",
    "StateResource",
    "local_pending",
    "pending_warning",
    "resources_of",
]


class _Read(Shape):
    """What this module reads of Pulumi's exported state (its format, not ours: other fields pass)."""

    model_config = ConfigDict(extra="ignore")


class _Process(_Read):
    """Of a server's or router's outputs: the process it runs (``ServerOutputs``, ``RouterOutputs``)."""

    pid: int | None = None


class StateResource(_Read):
    """A resource of the state, or the one a pending operation is about."""

    urn: str = ""
    type: str = ""
    inputs: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)


class Operation(_Read):
    """A pending operation: an update was interrupted while a provider worked on it."""

    resource: StateResource
    type: str
    """What was interrupted: ``creating``, ``updating``, ``deleting``, ``reading`` or ``importing``."""

    @property
    def label(self) -> str:
        """``creating baseline-server (sglang:Server)``."""
        name = self.resource.urn.rsplit("::", 1)[-1]
        return f"{self.type} {name} ({self.resource.type.removeprefix('pulumi-python:dynamic/')})"


class _Deployment(_Read):
    resources: list[StateResource] | None = None
    pending_operations: list[Operation] | None = None


class ExportedState(_Read):
    """``pulumi stack export``'s document."""

    version: int
    deployment: _Deployment = Field(default_factory=_Deployment)

    @property
    def operations(self) -> list[Operation]:
        return self.deployment.pending_operations or []

    def tracked(self, kind: str) -> set[int]:
        """The pids of the processes of resource type ``kind`` (servers, routers) the state tracks."""
        resources = [r for r in self.deployment.resources or [] if r.type == kind]
        found = (_Process.model_validate(r.outputs).pid for r in resources)
        return {pid for pid in found if pid is not None}


def resources_of(stack: auto.Stack) -> list[StateResource]:
    """The resources ``stack``'s state holds (secrets left encrypted)."""
    deployment = _Deployment.model_validate(stack.export_stack().deployment or {})
    return deployment.resources or []


class _Checkpoint(_Read):
    latest: _Deployment | None = None


class _StateFile(_Read):
    """A local backend's state file of a stack: the exported deployment, as ``checkpoint.latest``."""

    checkpoint: _Checkpoint = Field(default_factory=_Checkpoint)


def local_pending(project: str, stack: str, backend_url: str | None = None) -> list[Operation]:
    """The pending operations of ``stack``'s state, read from its file in a local backend
    (``file://`` in ``backend_url``, by default ``$PULUMI_BACKEND_URL``) without the Pulumi CLI:
    what the program of a running update reads of its own stack. Empty for another backend, or a
    file that cannot be read."""
    url = os.environ.get("PULUMI_BACKEND_URL", "") if backend_url is None else backend_url
    if not url.startswith("file://"):
        return []
    parts = urlparse(url)
    folder = Path(unquote(parts.netloc + parts.path)).expanduser() / ".pulumi" / "stacks" / project
    for path in (folder / f"{stack}.json", folder / f"{stack}.json.gz"):
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            latest = _StateFile.model_validate_json(raw).checkpoint.latest
        except (OSError, ValueError, ValidationError):
            continue
        return (latest.pending_operations or []) if latest else []
    return []


def pending_warning(stack: str, labels: Sequence[str]) -> str:
    """The warning of a stack whose state holds pending operations, listed by ``labels``."""
    return (
        f"stack {stack} has {len(labels)} pending operation(s) that interrupted updates left "
        f"({'; '.join(labels)}); Pulumi keeps them, one more for each killed update. "
        f"`sglang-stacks recover {stack}` clears them (stopping a server they left running that no "
        "state tracks) and says what to run for any it cannot settle."
    )
