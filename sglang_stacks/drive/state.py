"""Pulumi's exported state (``pulumi stack export``), read into models of the parts this tool reads:
its resources with their inputs and outputs, its pending operations. Pulumi's format, not ours:
fields the models do not name pass unread."""

from __future__ import annotations

from typing import Any

from pulumi import automation as auto
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ExportedState", "Operation", "StateResource", "resources_of"]


class _Read(BaseModel):
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
