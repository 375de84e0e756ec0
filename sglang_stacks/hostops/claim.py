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

import json
import os
import threading
from dataclasses import dataclass
from typing import Any

from sglang_stacks.errors import ClaimError, HostError
from sglang_stacks.hostops.transport import Connection, Session, open_session, run

__all__ = [
    "DEFAULT_STATE_DIR",
    "Claim",
    "acquire",
    "finish",
    "finish_all",
    "read",
    "record_server",
    "release",
]

DEFAULT_STATE_DIR = "~/.sglang-stacks"
"""Folder on the host that holds ``claim.json`` and the lock files."""
_LOCK_WAIT_S = 15.0
# The update's process says it is alive this often; the host lets the update lock go after
# _SILENCE_S without a word (a dead network does not close the session by itself).
_HEARTBEAT_S = 10.0
_SILENCE_S = 60.0

# Runs on the host with its python3, so the read, the decision and the write happen under one
# flock. Kept to Python 3.6 so any distribution's python3 can run it.
_PROGRAM = r"""
import fcntl, json, os, select, sys, time

env = os.environ
op, stack = env["CLAIM_OP"], env["CLAIM_STACK"]
folder = os.path.expanduser(env["CLAIM_DIR"])
path = os.path.join(folder, "claim.json")


def stamp():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def answer(outcome, claim=None, previous=None, updating=False):
    print(json.dumps({"outcome": outcome, "claim": claim, "previous": previous, "updating": updating}))
    sys.stdout.flush()


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


def try_lock(name):
    handle = open(os.path.join(folder, name), "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return handle
    except OSError:
        handle.close()
        return None


def lock_claim():
    handle = open(os.path.join(folder, "claim.lock"), "a")
    give_up = time.time() + float(env["CLAIM_LOCK_WAIT_S"])
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except OSError:
            if time.time() > give_up:
                answer("lock-timeout")
                sys.exit(0)
            time.sleep(0.05)


def load():
    try:
        with open(path) as handle:
            claim = json.load(handle)
        claim["stack"]
        return claim
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        answer("corrupt")
        sys.exit(0)


os.makedirs(folder, mode=0o700, exist_ok=True)
guard = lock_claim()
claim = load()
owned = claim is not None and claim["stack"] == stack

if op == "read":
    free = try_lock("update.lock")
    answer("read", claim, updating=free is None)
    sys.exit(0)

if op == "release":
    if not owned:
        answer("not-owner", claim)
        sys.exit(0)
    write(None)
    answer("released", None, claim)
    sys.exit(0)

if op in ("check", "record-server"):
    if not owned:
        answer("lost", claim)
        sys.exit(0)
    if op == "record-server":
        claim["server_pid"] = int(env["CLAIM_SERVER_PID"])
        claim["server_start_ticks"] = int(env["CLAIM_SERVER_START_TICKS"])
        write(claim)
    answer("ok", claim)
    sys.exit(0)

# acquire: take the update lock first; held by someone means an update is running now.
update_lock = try_lock("update.lock")
if update_lock is None:
    answer("busy", claim)
    sys.exit(0)
previous = claim if claim is not None and not owned else None
if previous is not None and env["CLAIM_TAKEOVER"] != "1":
    answer("held", claim)
    sys.exit(0)
if not owned:
    claim = {"stack": stack, "project": env["CLAIM_PROJECT"], "claimed_at": stamp(), "server_pid": None}
update_id = env["CLAIM_UPDATE_ID"]
claim.update({"update_id": update_id, "updating_since": stamp()})
write(claim)
guard.close()
answer("acquired", claim, previous, updating=True)

# Hold the update lock while the update's process is alive: it writes a line every few seconds
# and its end closes stdin.
while True:
    ready, _, _ = select.select([0], [], [], float(env["CLAIM_SILENCE_S"]))
    if not ready or not os.read(0, 4096):
        break
guard = lock_claim()
claim = load()
if claim is not None and claim["stack"] == stack and claim.get("update_id") == update_id:
    claim["updating_since"] = None
    write(claim)
"""

# The system python3 first: it starts fastest (no version-manager shims) and needs nothing but the
# standard library here; -I -S keep the user's site-packages and PYTHON* variables out. The
# program comes on descriptor 3, leaving stdin to the update's heartbeat.
_SCRIPT = f"""\
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || {{
    echo "sglang-stacks: the host has no python3, which the GPU claim needs; install python3" >&2
    exit 3
}}
exec "$py" -I -S /dev/fd/3 3<<'__SGLANG_STACKS_CLAIM__'
{_PROGRAM}
__SGLANG_STACKS_CLAIM__
"""


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
    def from_record(cls, record: dict[str, Any], *, updating: bool = False) -> Claim:
        """Reads the claim file's JSON object."""
        return cls(
            stack=str(record["stack"]),
            project=str(record.get("project", "")),
            claimed_at=str(record.get("claimed_at", "")),
            update_id=str(record.get("update_id", "")),
            updating_since=record.get("updating_since"),
            updating=updating,
            server_pid=record.get("server_pid"),
            server_start_ticks=record.get("server_start_ticks"),
        )


class _Lease:
    """This process's hold on a host's update lock: a session plus its heartbeat."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._stopped = threading.Event()
        # The provider process outlives a Pulumi CLI that was killed (it is then reparented):
        # the update is over then, and so is the hold on the host.
        self._engine_pid = os.getppid()
        threading.Thread(target=self._beat, daemon=True).start()

    def _beat(self) -> None:
        while not self._stopped.wait(_HEARTBEAT_S):
            if os.getppid() != self._engine_pid or not self.session.send(b"\n"):
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
            _owner_call(conn, "check", stack, state_dir)
            return None
        session = open_session(
            conn,
            _SCRIPT,
            env=_env("acquire", stack, state_dir, takeover=takeover, project=project, update_id=update_id),
        )
        answer = _parse(
            conn, session.read_line(timeout_s=_LOCK_WAIT_S + conn.connect_timeout_s + 30), state_dir
        )
        if answer["outcome"] != "acquired":
            session.close()
            raise _refusal(conn, stack, answer)
        _LEASES[key] = _Lease(session)
    previous = answer["previous"]
    return None if previous is None else Claim.from_record(previous)


def read(conn: Connection, *, state_dir: str = DEFAULT_STATE_DIR) -> Claim | None:
    """The host's current claim, or None when no stack owns its GPUs."""
    answer = _call(conn, "read", "", state_dir)
    claim = answer["claim"]
    return None if claim is None else Claim.from_record(claim, updating=bool(answer["updating"]))


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
    _owner_call(
        conn,
        "record-server",
        stack,
        state_dir,
        CLAIM_SERVER_PID=str(int(pid)),
        CLAIM_SERVER_START_TICKS=str(int(start_ticks)),
    )


def release(conn: Connection, stack: str, *, state_dir: str = DEFAULT_STATE_DIR) -> bool:
    """Removes the claim if ``stack`` still owns it; False (and nothing changed) otherwise."""
    _check_stack(stack)
    finish(conn, stack, state_dir=state_dir)
    return bool(_call(conn, "release", stack, state_dir)["outcome"] == "released")


def _check_stack(stack: str) -> None:
    if not stack:
        raise ValueError("a claim needs the stack's name")


def _env(op: str, stack: str, state_dir: str, **values: Any) -> dict[str, str]:
    env = {
        "CLAIM_OP": op,
        "CLAIM_STACK": stack,
        "CLAIM_DIR": state_dir,
        "CLAIM_LOCK_WAIT_S": repr(_LOCK_WAIT_S),
        "CLAIM_SILENCE_S": repr(_SILENCE_S),
    }
    if "takeover" in values:
        env["CLAIM_TAKEOVER"] = "1" if values["takeover"] else "0"
        env["CLAIM_PROJECT"] = str(values["project"])
        env["CLAIM_UPDATE_ID"] = str(values["update_id"])
    return env


def _refusal(conn: Connection, stack: str, answer: dict[str, Any]) -> ClaimError:
    claim = answer["claim"]
    if answer["outcome"] == "held":
        return ClaimError(
            f"The GPUs of {conn.label} belong to stack {claim['stack']!r} (claimed {claim['claimed_at']}) "
            f"and this update of {stack!r} may not take them over. Allow the takeover for this stack "
            f"(the other stack's server is stopped first), or free the host with "
            f"`pulumi destroy -s {claim['stack']}`."
        )
    if claim is None:
        holder = "Another update is running on"
    else:
        since = claim.get("updating_since") or claim.get("claimed_at")
        update = claim.get("update_id") or "unnamed"
        holder = f"Stack {claim['stack']!r} (update {update}, since {since}) is updating"
    return ClaimError(
        f"{holder} {conn.label}, so this update of {stack!r} stops here and launches nothing. "
        f"Wait for that update to finish, then run `pulumi up -s {stack}` again."
    )


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
    result = run(conn, _SCRIPT, timeout_s=_LOCK_WAIT_S + 30, env={**_env(op, stack, state_dir), **env})
    if not result.ok:
        raise HostError(
            f"The GPU claim step {op!r} failed on {conn.label} (exit {result.exit_code}): "
            f"{result.stderr.strip()[-400:] or 'no output'}. "
            f"Check that {state_dir} on the host is writable by this user and python3 runs."
        )
    lines = result.stdout.strip().splitlines()
    return _parse(conn, lines[-1] if lines else "", state_dir)


def _parse(conn: Connection, line: str, state_dir: str) -> dict[str, Any]:
    try:
        answer: dict[str, Any] = json.loads(line)
    except ValueError:
        raise HostError(
            f"The GPU claim on {conn.label} answered {line[-200:]!r} instead of JSON. "
            "Check that the user's login prints nothing on non-interactive shells."
        ) from None
    if answer["outcome"] == "lock-timeout":
        raise ClaimError(
            f"The claim lock on {conn.label} stayed taken for {_LOCK_WAIT_S:g} s. A claim operation "
            f"is stuck there: find it with `fuser {state_dir}/claim.lock` on the host and stop it."
        )
    if answer["outcome"] == "corrupt":
        raise ClaimError(
            f"The claim file {state_dir}/claim.json on {conn.label} is not a claim. Check that no stack "
            "is deploying to the host, remove the file, and run the update again."
        )
    return answer
