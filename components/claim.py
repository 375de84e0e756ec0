"""Which stack owns a host's GPUs: a claim file on the host, changed only under ``flock``.

The claim names its stack and, while an update of that stack runs, a lease: the time until which
that update is working on the host. Another stack may take an idle claim over (its caller stops
the previous stack's server first), but never one under a live lease: of two updates racing for
one host, the first to reach the lock wins and the other gets ClaimError before launching
anything. A stack renews its lease by acquiring again before each step that touches the GPUs,
and ends it with `finish` when its update is done; a lease left by an interrupted update expires.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from components._transport import Connection, run
from components.errors import ClaimError, HostError

__all__ = [
    "DEFAULT_LEASE_S",
    "DEFAULT_STATE_DIR",
    "Claim",
    "acquire",
    "finish",
    "read",
    "record_server",
    "release",
]

DEFAULT_STATE_DIR = "~/.sglang-stacks"
"""Folder on the host that holds ``claim.json`` and its lock file."""
DEFAULT_LEASE_S = 3600.0
"""How long an update may hold the host between two renewals (model loading, graph capture,
benchmark) before another stack may take over from it."""
_LOCK_WAIT_S = 15.0

# Runs on the host with its python3, so the read, the decision and the write happen under one
# flock. Kept to Python 3.6 so any distribution's python3 can run it.
_PROGRAM = r"""
import calendar, fcntl, json, os, sys, time

env = os.environ
op, stack = env["CLAIM_OP"], env["CLAIM_STACK"]
folder = os.path.expanduser(env["CLAIM_DIR"])
path = os.path.join(folder, "claim.json")


def stamp(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def epoch(text):
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def answer(outcome, claim=None, previous=None):
    print(json.dumps({"outcome": outcome, "claim": claim, "previous": previous, "now": stamp(now)}))
    sys.exit(0)


def write(claim):
    if claim is None:
        os.unlink(path)
        return
    staging = path + ".tmp"
    with open(staging, "w") as handle:
        json.dump(claim, handle, indent=2, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)


os.makedirs(folder, mode=0o700, exist_ok=True)
lock = open(os.path.join(folder, "claim.lock"), "a")
give_up = time.time() + float(env["CLAIM_LOCK_WAIT_S"])
while True:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        break
    except OSError:
        if time.time() > give_up:
            now = time.time()
            answer("lock-timeout")
        time.sleep(0.05)

now = time.time()
try:
    with open(path) as handle:
        claim = json.load(handle)
    claim["stack"]
except FileNotFoundError:
    claim = None
except (ValueError, KeyError, TypeError):
    answer("corrupt")

if op == "read":
    answer("read", claim)

if op == "release":
    if claim is None or claim["stack"] != stack:
        answer("not-owner", claim)
    write(None)
    answer("released", None, claim)

if op in ("finish", "record-server"):
    if claim is None or claim["stack"] != stack:
        answer("lost", claim)
    if op == "finish":
        claim["updating_since"] = claim["updating_until"] = None
    else:
        claim["server_pid"] = int(env["CLAIM_SERVER_PID"])
    write(claim)
    answer("ok", claim)

# acquire
lease = {
    "update_id": env["CLAIM_UPDATE_ID"],
    "updating_until": stamp(now + float(env["CLAIM_LEASE_S"])),
}
if claim is not None and claim["stack"] == stack:
    claim.update(lease)
    claim["updating_since"] = claim.get("updating_since") or stamp(now)
    write(claim)
    answer("renewed", claim)
if claim is not None:
    until = claim.get("updating_until")
    if until and epoch(until) > now:
        answer("busy", claim)
    if env["CLAIM_TAKEOVER"] != "1":
        answer("held", claim)
fresh = {
    "stack": stack,
    "project": env["CLAIM_PROJECT"],
    "claimed_at": stamp(now),
    "updating_since": stamp(now),
    "server_pid": None,
}
fresh.update(lease)
write(fresh)
answer("acquired", fresh, claim)
"""

# The system python3 first: it starts fastest (no version-manager shims) and needs nothing but the
# standard library here; -I -S keep the user's site-packages and PYTHON* variables out.
_SCRIPT = """\
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || {
    echo "sglang-stacks: the host has no python3, which the GPU claim needs; install python3" >&2
    exit 3
}
exec "$py" -I -S -
"""


@dataclass(frozen=True)
class Claim:
    """The stack that owns a host's GPUs, as recorded on the host (times in UTC, ISO 8601)."""

    stack: str
    project: str
    claimed_at: str
    update_id: str
    """The update that last acquired or renewed the claim."""
    updating_since: str | None
    """When the running update of ``stack`` started; None when no update is running."""
    updating_until: str | None
    """When that update's lease runs out unless renewed."""
    server_pid: int | None
    """The pid of the stack's SGLang server, once recorded."""

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Claim:
        """Reads the claim file's JSON object."""
        return cls(
            stack=str(record["stack"]),
            project=str(record.get("project", "")),
            claimed_at=str(record.get("claimed_at", "")),
            update_id=str(record.get("update_id", "")),
            updating_since=record.get("updating_since"),
            updating_until=record.get("updating_until"),
            server_pid=record.get("server_pid"),
        )


def acquire(
    conn: Connection,
    stack: str,
    *,
    takeover: bool,
    project: str = "sglang-stacks",
    update_id: str = "",
    lease_s: float = DEFAULT_LEASE_S,
    state_dir: str = DEFAULT_STATE_DIR,
) -> Claim | None:
    """Claims the host's GPUs for ``stack`` with a lease of ``lease_s`` for its running update.

    Acquiring again as the owner renews the lease. With ``takeover`` an idle claim of another
    stack is handed over and that stack's claim is returned, so the caller stops its server
    before launching; without it, or while the other stack is updating, ClaimError.
    """
    answer = _call(
        conn,
        "acquire",
        stack,
        state_dir,
        CLAIM_TAKEOVER="1" if takeover else "0",
        CLAIM_PROJECT=project,
        CLAIM_UPDATE_ID=update_id,
        CLAIM_LEASE_S=repr(float(lease_s)),
    )
    outcome, claim = answer["outcome"], answer["claim"]
    if outcome == "busy":
        raise ClaimError(
            f"Stack {claim['stack']!r} is updating {conn.label} since {claim['updating_since']} "
            f"(update {claim['update_id'] or 'unnamed'}), so this update of {stack!r} stops here and "
            f"launches nothing. Wait for that update to finish, then run `pulumi up -s {stack}` again; "
            f"if it was interrupted, its lease runs out at {claim['updating_until']}."
        )
    if outcome == "held":
        raise ClaimError(
            f"The GPUs of {conn.label} belong to stack {claim['stack']!r} (claimed {claim['claimed_at']}) "
            f"and this update of {stack!r} may not take them over. Allow the takeover for this stack "
            f"(the other stack's server is stopped first), or free the host with "
            f"`pulumi destroy -s {claim['stack']}`."
        )
    if outcome == "acquired" and answer["previous"] is not None:
        return Claim.from_record(answer["previous"])
    return None


def read(conn: Connection, *, state_dir: str = DEFAULT_STATE_DIR) -> Claim | None:
    """The host's current claim, or None when no stack owns its GPUs."""
    claim = _call(conn, "read", "", state_dir)["claim"]
    return None if claim is None else Claim.from_record(claim)


def finish(conn: Connection, stack: str, *, state_dir: str = DEFAULT_STATE_DIR) -> None:
    """Ends the lease of ``stack``'s update (the update is done); the stack keeps the GPUs."""
    _owner_call(conn, "finish", stack, state_dir)


def record_server(conn: Connection, stack: str, pid: int, *, state_dir: str = DEFAULT_STATE_DIR) -> None:
    """Notes the pid of ``stack``'s SGLang server in its claim; ClaimError if it lost the claim."""
    _owner_call(conn, "record-server", stack, state_dir, CLAIM_SERVER_PID=str(int(pid)))


def release(conn: Connection, stack: str, *, state_dir: str = DEFAULT_STATE_DIR) -> bool:
    """Removes the claim if ``stack`` still owns it; False (and nothing changed) otherwise."""
    return bool(_call(conn, "release", stack, state_dir)["outcome"] == "released")


def _owner_call(conn: Connection, op: str, stack: str, state_dir: str, **env: str) -> None:
    answer = _call(conn, op, stack, state_dir, **env)
    if answer["outcome"] == "lost":
        claim = answer["claim"]
        now_owned_by = f"stack {claim['stack']!r} does now" if claim else "no stack does now"
        raise ClaimError(
            f"Stack {stack!r} no longer owns the GPUs of {conn.label}; {now_owned_by}. "
            f"Run `pulumi up -s {stack}` to claim the host again."
        )


def _call(conn: Connection, op: str, stack: str, state_dir: str, **env: str) -> dict[str, Any]:
    claim_file = f"{state_dir.rstrip('/')}/claim.json"
    result = run(
        conn,
        _SCRIPT,
        timeout_s=_LOCK_WAIT_S + 30,
        stdin=_PROGRAM.encode(),
        env={
            "CLAIM_OP": op,
            "CLAIM_STACK": stack,
            "CLAIM_DIR": state_dir,
            "CLAIM_LOCK_WAIT_S": repr(_LOCK_WAIT_S),
            **env,
        },
    )
    if not result.ok:
        raise HostError(
            f"The GPU claim step {op!r} failed on {conn.label} (exit {result.exit_code}): "
            f"{result.stderr.strip()[-400:] or 'no output'}. "
            f"Check that {claim_file} is writable by this user and python3 runs."
        )
    try:
        answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise HostError(
            f"The GPU claim on {conn.label} answered {result.stdout.strip()[-200:]!r} instead of JSON. "
            "Check that the user's login prints nothing on non-interactive shells."
        ) from None
    if answer["outcome"] == "lock-timeout":
        raise ClaimError(
            f"The claim lock on {conn.label} stayed taken for {_LOCK_WAIT_S:g} s. A claim operation "
            f"is stuck there: find it with `fuser {state_dir}/claim.lock` on the host and stop it."
        )
    if answer["outcome"] == "corrupt":
        raise ClaimError(
            f"The claim file {claim_file} on {conn.label} is not a claim. Check that no stack is "
            "deploying to the host, remove the file, and run the update again."
        )
    return answer
