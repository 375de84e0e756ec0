"""A provider's progress on ``pulumi up``'s own output: status messages on the resource's row,
sent to the engine's log service as ephemeral messages. The engine shows the latest one beside
the resource while its step runs (in a terminal on its row, in a log as a line of its own) and
leaves it out of the diagnostics it prints at the end, as it does for any provider that reports
progress.

The engine starts every provider process with its own address as the first argument. Pulumi's
Python dynamic-provider host does not connect to it, so ``pulumi.log`` inside a provider prints to
stderr, which the engine shows on the stack's row, not the resource's, and repeats among the
diagnostics. A provider method called outside a provider process (a test calling it) has no
engine: its status goes nowhere.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["EngineStatus", "engine_address", "own_urn"]

_PROVIDER_HOST = "pulumi.dynamic.__main__"
"""The module Pulumi's dynamic-provider plugin runs as ``__main__``."""

_DYNAMIC_TYPE = "pulumi-python:dynamic/{module}:{name}"


def engine_address() -> str | None:
    """The engine's address when this process is a Pulumi provider process, else None."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) != _PROVIDER_HOST or len(sys.argv) < 2:
        return None
    return sys.argv[1]


def own_urn(name: str, module: str, type_name: str, parent: Any) -> Any:
    """The URN a dynamic resource of ``module``/``type_name`` named ``name`` under ``parent`` (a
    resource or None) will have, as an Output its provider gets as an input.

    Made from the parent's URN as a bare value: an Output depending on a component would wait
    for the component's children, this resource among them."""
    import pulumi

    parent_urn = parent.urn.future() if parent is not None else None
    type_ = _DYNAMIC_TYPE.format(module=module, name=type_name)
    return pulumi.resource.create_urn(name, type_, parent=parent_urn)


class EngineStatus:
    """Sends status messages about the resource ``urn`` to the engine running this provider."""

    def __init__(self, urn: str) -> None:
        self._urn = urn
        self._address = engine_address() if urn else None
        self._stub: Any = None
        self._channel: Any = None

    @property
    def active(self) -> bool:
        """Whether an engine hears the messages (this is a provider process and the URN is known)."""
        return self._address is not None

    def say(self, message: str) -> None:
        """Show ``message`` beside the resource until the next one or the end of its step. A
        message the engine cannot take is dropped: progress never fails the step it reports on."""
        if self._address is None:
            return
        import grpc
        from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc

        if self._stub is None:
            self._channel = grpc.insecure_channel(self._address)
            self._stub = engine_pb2_grpc.EngineStub(self._channel)
        request = engine_pb2.LogRequest(
            severity=engine_pb2.INFO, message=message, urn=self._urn, ephemeral=True
        )
        try:
            self._stub.Log(request, timeout=5)
        except grpc.RpcError:
            return

    def close(self) -> None:
        """Let go of the connection to the engine."""
        if self._channel is not None:
            self._channel.close()
            self._channel = self._stub = None
