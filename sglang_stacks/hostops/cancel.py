"""An update cancelled by its user (Ctrl-C, SIGTERM): what a provider process is doing on a host
stops at once, so the engine hears back before a second Ctrl-C ends it.

The Pulumi CLI starts its plugins in process groups of their own, so a terminal's Ctrl-C reaches
the CLI alone. The first one cancels gracefully: the engine waits for the operations in flight and
asks every provider to cancel (its ``Cancel`` call). Python's dynamic-provider host answers that
call and does nothing else, so a server's start, a benchmark or an install ran on to its end; a
second Ctrl-C, which ends the CLI at once, then left the operation pending in the state, and only
a refresh that clears pending creates removes it. `listen` makes that call set `requested`:
the host scripts in flight are stopped (`transport` checks it while it waits) and the operation
fails with `Cancelled`, which the engine records: nothing is left pending.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from sglang_stacks.errors import UpdateCancelledError as Cancelled

__all__ = ["Cancelled", "listen", "requested"]

_REQUESTED = threading.Event()
_SERVICER = "DynamicResourceProviderServicer"
"""The class of the dynamic-provider host (``python -m pulumi.dynamic``) that answers the engine."""


def requested() -> bool:
    """Whether the engine asked this process to cancel."""
    return _REQUESTED.is_set()


def _cancel(self: Any, request: Any, context: Any) -> Any:
    """The dynamic-provider host's ``Cancel``, which also sets `requested`. It runs as the host's
    own method (its code swapped in), so it names nothing from this module's globals."""
    from google.protobuf import empty_pb2

    from sglang_stacks.hostops import cancel

    cancel._REQUESTED.set()
    return empty_pb2.Empty()


def listen() -> None:
    """In a dynamic-provider process, makes the engine's ``Cancel`` call set `requested`; does
    nothing elsewhere, and once only.

    The host's gRPC server bound its ``Cancel`` method when it started, before any provider code was
    imported, so the method's code is what changes: the bound method then runs `_cancel`'s."""
    servicer: Any = getattr(sys.modules.get("__main__"), _SERVICER, None)
    method = getattr(servicer, "Cancel", None)
    if method is None or method.__code__ is _cancel.__code__:
        return
    method.__code__ = _cancel.__code__
