"""What an interrupted create of a server or a fleet's router can leave on its host: a process that
no state tracks. `recover` looks for it before it clears the stack's pending operations and stops
it after: a server the claim records, or a router whose start recorded its pid beside its log.

A server the state tracks is never one of these: it serves on (a `pulumi up` killed during its
benchmark keeps its server).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sglang_stacks.errors import ClaimError

if TYPE_CHECKING:
    from sglang_stacks.hostops.claim import Claim
    from sglang_stacks.hostops.connection import Connection

__all__ = ["HOST_UPDATE_WAIT_S", "Leftover", "find_router", "find_server"]

HOST_UPDATE_WAIT_S = 75.0
"""How long the host's update lock may stay taken once Pulumi's lock says the update is dead: the
provider of a killed update lets go within seconds, and a host that stops hearing from one lets go
after the claim's 60 s of silence."""


@dataclass(frozen=True)
class Leftover:
    """What was found on a pending create's host, and the process to stop, if any."""

    found: str
    """What was found, as a clause: ``the local host runs no server of k that the state does not know``."""
    stop: Callable[[], str] | None = None
    """Stops the process and says so; None when nothing runs that no state tracks."""
    if_not_stopped: str = ""
    """What to do when stopping it fails."""


def _idle_claim(conn: Connection, stack: str, state_dir: str, wait_s: float) -> Claim | None:
    """The host's claim once no update of ``stack`` holds the host's update lock; ClaimError when one
    still does after ``wait_s`` (an update of it runs elsewhere)."""
    from sglang_stacks.hostops import claim

    deadline = time.monotonic() + wait_s
    while True:
        holder = claim.read(conn, state_dir=state_dir)
        if holder is None or holder.stack != stack or not holder.updating:
            return holder
        if time.monotonic() >= deadline:
            raise ClaimError(
                f"An update of stack {stack!r} holds {conn.label} (since {holder.updating_since}) although "
                f"Pulumi's lock of the stack is free: it runs from another project folder or machine. Let "
                f"it finish (or stop it), then run `sglang-stacks recover {stack}` again."
            )
        time.sleep(1.0)


def find_server(inputs: Mapping[str, Any], tracked: set[int], wait_s: float = HOST_UPDATE_WAIT_S) -> Leftover:
    """The server an interrupted create launched, if it still runs and no state tracks it (the
    claim records every launch). Waits up to ``wait_s`` for a dead update's provider to let go of
    the host."""
    from sglang_stacks.components.server import ServerInputs  # the providers, only for this command
    from sglang_stacks.hostops import process

    typed = ServerInputs.model_validate(dict(inputs))
    conn = typed.connection
    holder = _idle_claim(conn, typed.stack, typed.state_dir, wait_s)
    nothing = Leftover(f"{conn.label} runs no server of {typed.stack} that the state does not know")
    if holder is None or holder.stack != typed.stack:
        return nothing
    pid, ticks = holder.server_pid, holder.server_start_ticks
    gone = ticks is not None and not process.is_running(conn, process.Running(pid or 0, ticks))
    if not pid or pid in tracked or gone:
        return nothing

    def stop() -> str:
        process.stop_recorded(conn, holder, typed.nvidia_smi, typed.stop_timeout_s, typed.state_dir)
        return f"stopped the server it had launched on {conn.label} (pid {pid})"

    return Leftover(
        f"the server it had launched on {conn.label} (pid {pid}) runs, known to no state",
        stop,
        "The next `pulumi up` stops it before it launches a server (the claim records it).",
    )


def find_router(inputs: Mapping[str, Any], tracked: set[int]) -> Leftover:
    """The router an interrupted create started, if it still runs and no state tracks it."""
    from sglang_stacks.components.router import RouterInputs, leftover_router, stop_router

    typed = RouterInputs.model_validate(dict(inputs))
    where = f"{typed.host}:{typed.port} ({typed.connection.label})"
    left = leftover_router(typed)
    if left is None or left[0] in tracked:
        return Leftover(f"{where} runs no router that the state does not know")
    pid, ticks = left

    def stop() -> str:
        stop_router(typed, pid, ticks)
        return f"stopped the router it had started on {where} (pid {pid})"

    return Leftover(
        f"the router it had started on {where} (pid {pid}) runs, known to no state",
        stop,
        f"Stop it on the host (`kill {pid}`) before the next `pulumi up`, which would find its port taken.",
    )
