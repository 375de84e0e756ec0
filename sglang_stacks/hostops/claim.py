"""Which stack owns a host's GPUs: a claim file on the host, changed only under ``flock``, and an
update lock that a stack's running update holds for as long as it runs.

`acquire` leaves a small process on the host holding the update lock, tied to this process by a
session: it lets go when the update's process ends, however it ends (done, failed, killed), or
when the host stops hearing from it. Another stack may take an idle claim over (its caller
stops the previous stack's server first) but never while the owner's update runs: of two
updates racing for one host, the first to reach the lock wins and the other gets ClaimError
before it launches anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sglang_stacks.errors import ClaimError
from sglang_stacks.hostops import lifetime
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs import claim_contract as program
from sglang_stacks.hostops.programs.claim_contract import ClaimAnswer, ClaimRecord, Outcome
from sglang_stacks.hostops.programs.runner import call
from sglang_stacks.hostops.session import Session

__all__ = [
    "DEFAULT_STATE_DIR",
    "Claim",
    "acquire",
    "check_noted",
    "finish",
    "finish_all",
    "read",
    "record_server",
    "release",
]

DEFAULT_STATE_DIR = "~/.sglang-stacks"
"""Folder on the host that holds ``claim.json`` and the lock files."""
# How long the claim program waits for the claim lock when server.sh runs it at a launch.
_NOTED_LOCK_WAIT_S = program.RecordServer.model_fields["lock_wait_s"].default
# The update's process says it is alive this often, well within the claim program's silence_s.
_HEARTBEAT_S = 10.0

# The host program (programs/claim.py) runs with the host's system python3: the read, the decision
# and the write happen there under one flock.


@dataclass(frozen=True)
class Claim:
    """The stack that owns a host's GPUs, as recorded on the host (times in UTC, ISO 8601)."""

    stack: str
    project: str
    claimed_at: str
    update_id: str
    """The update of ``stack`` that last acquired the claim."""
    updating_since: str | None
    """When that update started, while it runs (or until the next acquire, if it was killed)."""
    updating: bool
    """Whether an update holds the host's update lock right now."""
    server_pid: int | None
    """The pid of the stack's SGLang server, once recorded."""
    server_start_ticks: int | None = None
    """That process's start time (clock ticks since boot): a reused pid is not the server."""

    @classmethod
    def from_record(cls, record: ClaimRecord, *, updating: bool = False) -> Claim:
        """The claim the host's claim file records."""
        return cls(**record.model_dump(), updating=updating)


class _Lease:
    """This process's hold on a host's update lock: a session plus its heartbeat."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._stopped = threading.Event()
        # The provider process outlives a Pulumi CLI that was killed (its parent is a shell
        # wrapper that survives too): the engine's address tells when the update is over, and
        # with it the hold on the host; the watch then ends the whole process.
        lifetime.on_engine_gone(finish_all)
        lifetime.watch_engine()
        threading.Thread(target=self._beat, daemon=True).start()

    def _beat(self) -> None:
        while not self._stopped.wait(_HEARTBEAT_S):
            if not lifetime.update_alive() or not self.session.send(b"\n"):
                self.end()
                return

    def end(self) -> None:
        self._stopped.set()
        self.session.close()


# Leases held by this process (a Pulumi provider process lives exactly as long as its update),
# by host, state folder and stack.
_LEASES: dict[tuple[str, str, str], _Lease] = {}
_LEASES_LOCK = threading.Lock()


def acquire(
    conn: Connection,
    stack: str,
    *,
    takeover: bool,
    project: str = "sglang-stacks",
    update_id: str = "",
    state_dir: str = DEFAULT_STATE_DIR,
) -> Claim | None:
    """Claims the host's GPUs for ``stack`` for as long as this process's update runs.

    Acquiring again from the same process only checks that ``stack`` still owns the host. With
    ``takeover`` an idle claim of another stack is handed over and that stack's claim is
    returned, so the caller stops its server before launching; without it, or while another
    update holds the host, ClaimError.
    """
    _check_stack(stack)
    key = (conn.label, state_dir, stack)
    with _LEASES_LOCK:
        lease = _LEASES.get(key)
        if lease is not None and lease.session.alive:
            _owner_answer(conn, stack, call(conn, program.Check(stack=stack, folder=state_dir)))
            return None
        held = call(
            conn,
            program.Acquire(
                stack=stack, folder=state_dir, takeover=takeover, project=project, update_id=update_id
            ),
        )
        answer = held.answer
        if answer.outcome is not Outcome.ACQUIRED:
            held.session.close()
            raise _refusal(conn, stack, answer)
        _LEASES[key] = _Lease(held.session)
    return None if answer.previous is None else Claim.from_record(answer.previous)


def read(conn: Connection, *, state_dir: str = DEFAULT_STATE_DIR) -> Claim | None:
    """The host's current claim, or None when no stack owns its GPUs."""
    answer = call(conn, program.Read(stack="", folder=state_dir))
    return None if answer.claim is None else Claim.from_record(answer.claim, updating=answer.updating)


def finish(conn: Connection, stack: str, *, state_dir: str = DEFAULT_STATE_DIR) -> None:
    """Lets go of the update lock this process holds for ``stack``; the stack keeps the GPUs.

    Ending the process does the same; this is for a process that goes on with other work.
    """
    with _LEASES_LOCK:
        lease = _LEASES.pop((conn.label, state_dir, stack), None)
    if lease is not None:
        lease.end()


def finish_all() -> None:
    """Lets go of every update lock this process holds."""
    with _LEASES_LOCK:
        leases = list(_LEASES.values())
        _LEASES.clear()
    for lease in leases:
        lease.end()


def record_server(
    conn: Connection, stack: str, pid: int, start_ticks: int, *, state_dir: str = DEFAULT_STATE_DIR
) -> None:
    """Notes ``stack``'s SGLang server (pid and start time) in its claim; ClaimError if it lost
    the claim."""
    noted = program.RecordServer(
        stack=stack, folder=state_dir, server_pid=pid, server_start_ticks=start_ticks
    )
    _owner_answer(conn, stack, call(conn, noted))


def check_noted(conn: Connection, stack: str, answer: str, *, state_dir: str = DEFAULT_STATE_DIR) -> None:
    """Checks the claim program's answer to ``record-server`` that another host program ran (the
    server's launch notes its server in the claim in the same run); ClaimError if ``stack`` lost
    the claim or the note failed."""
    lines = answer.strip().splitlines()
    _owner_answer(
        conn, stack, ClaimAnswer.from_line(conn, lines[-1] if lines else "", state_dir, _NOTED_LOCK_WAIT_S)
    )


def release(conn: Connection, stack: str, *, state_dir: str = DEFAULT_STATE_DIR) -> bool:
    """Removes the claim if ``stack`` still owns it; False (and nothing changed) otherwise."""
    _check_stack(stack)
    finish(conn, stack, state_dir=state_dir)
    return call(conn, program.Release(stack=stack, folder=state_dir)).outcome is Outcome.RELEASED


def _check_stack(stack: str) -> None:
    if not stack:
        raise ValueError("a claim needs the stack's name")


def _refusal(conn: Connection, stack: str, answer: ClaimAnswer) -> ClaimError:
    claim = answer.claim
    if answer.outcome is Outcome.HELD and claim is not None:
        return ClaimError(
            f"The GPUs of {conn.label} belong to stack {claim.stack!r} (claimed {claim.claimed_at}) "
            f"and this update of {stack!r} may not take them over. Allow the takeover for this stack "
            f"(the other stack's server is stopped first), or free the host with "
            f"`pulumi destroy -s {claim.stack}`."
        )
    if claim is None:
        holder = "Another update is running on"
    else:
        since = claim.updating_since or claim.claimed_at
        update = claim.update_id or "unnamed"
        holder = f"Stack {claim.stack!r} (update {update}, since {since}) is updating"
    return ClaimError(
        f"{holder} {conn.label}, so this update of {stack!r} stops here and launches nothing. "
        f"Wait for that update to finish, then run `pulumi up -s {stack}` again."
    )


def _owner_answer(conn: Connection, stack: str, answer: ClaimAnswer) -> None:
    if answer.outcome is Outcome.LOST:
        claim = answer.claim
        now_owned_by = f"stack {claim.stack!r} does now" if claim else "no stack does now"
        raise ClaimError(
            f"Stack {stack!r} no longer owns the GPUs of {conn.label}; {now_owned_by}. "
            f"Run `pulumi up -s {stack}` to claim the host again."
        )
