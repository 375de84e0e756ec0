"""The GPU claim on the host: reads, decides and writes ``claim.json`` under one ``flock``.

Runs with the host's system python3 (3.7 or newer, standard library only). Usage:
``claim.py OP STACK FOLDER [--takeover] [--project P] [--update-id U] [--server-pid N
--server-start-ticks N] [--lock-wait-s S] [--silence-s S]``; OP is read, release, check,
record-server or acquire. It prints one JSON line: ``{"outcome", "claim", "previous", "updating"}``.

``acquire`` then holds the update lock while its caller lives: the caller writes a line every few
seconds, and end of file on stdin (or ``--silence-s`` without a line) lets the lock go.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import select
import sys
import time
from typing import IO, NoReturn

MODES = ("read", "release", "check", "record-server", "acquire")

# A claim is the claim file's JSON object: stack, project, claimed_at, update_id, updating_since,
# server_pid, server_start_ticks. Annotations stay unevaluated, so older python3s run this.


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def answer(
    outcome: str,
    claim: dict[str, object] | None = None,
    previous: dict[str, object] | None = None,
    updating: bool = False,
) -> None:
    print(json.dumps({"outcome": outcome, "claim": claim, "previous": previous, "updating": updating}))
    sys.stdout.flush()


def finish(
    outcome: str,
    claim: dict[str, object] | None = None,
    previous: dict[str, object] | None = None,
    updating: bool = False,
) -> NoReturn:
    answer(outcome, claim, previous, updating)
    sys.exit(0)


class Folder:
    """The state folder on the host: the claim file and its locks."""

    def __init__(self, path: str, lock_wait_s: float) -> None:
        self.path = os.path.expanduser(path)
        self.claim_path = os.path.join(self.path, "claim.json")
        self.lock_wait_s = lock_wait_s
        os.makedirs(self.path, mode=0o700, exist_ok=True)

    def write(self, claim: dict[str, object] | None) -> None:
        if claim is None:
            os.unlink(self.claim_path)
            return
        # A claim file is never half written: the new one is renamed over the old.
        staging = self.claim_path + ".tmp"
        with open(staging, "w") as handle:
            json.dump(claim, handle, indent=2, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, self.claim_path)

    def try_lock(self, name: str) -> IO[str] | None:
        """The lock file ``name``, locked, or None when another process holds it."""
        handle = open(os.path.join(self.path, name), "a")  # noqa: SIM115 (held as the lock)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except OSError:
            handle.close()
            return None

    def lock_claim(self) -> IO[str]:
        """The claim lock, waited for; the file stays open while waiting, so the waiters show."""
        handle = open(os.path.join(self.path, "claim.lock"), "a")  # noqa: SIM115 (held as the lock)
        give_up = time.time() + self.lock_wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return handle
            except OSError:
                if time.time() > give_up:
                    finish("lock-timeout")
                time.sleep(0.05)

    def load(self) -> dict[str, object] | None:
        try:
            with open(self.claim_path) as handle:
                claim: dict[str, object] = json.load(handle)
            claim["stack"]
            return claim
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            finish("corrupt")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="claim.py")
    parser.add_argument("op", choices=MODES)
    parser.add_argument("stack")
    parser.add_argument("folder")
    parser.add_argument("--takeover", action="store_true")
    parser.add_argument("--project", default="sglang-stacks")
    parser.add_argument("--update-id", default="")
    parser.add_argument("--server-pid", type=int)
    parser.add_argument("--server-start-ticks", type=int)
    parser.add_argument("--lock-wait-s", type=float, default=15.0)
    parser.add_argument("--silence-s", type=float, default=60.0)
    return parser.parse_args(argv)


def owner_ops(args: argparse.Namespace, folder: Folder, claim: dict[str, object] | None) -> NoReturn:
    """read, release, check and record-server: each answers once and ends."""
    owned = claim is not None and claim["stack"] == args.stack
    if args.op == "read":
        finish("read", claim, updating=folder.try_lock("update.lock") is None)
    if not owned:
        finish("not-owner" if args.op == "release" else "lost", claim)
    assert claim is not None
    if args.op == "release":
        folder.write(None)
        finish("released", None, previous=claim)
    if args.op == "record-server":
        claim["server_pid"] = args.server_pid
        claim["server_start_ticks"] = args.server_start_ticks
        folder.write(claim)
    finish("ok", claim)


def acquire(
    args: argparse.Namespace, folder: Folder, guard: IO[str], claim: dict[str, object] | None
) -> None:
    """Takes the update lock (held by someone means an update runs now) and the claim, then holds
    the lock for as long as the caller lives."""
    update_lock = folder.try_lock("update.lock")
    if update_lock is None:
        finish("busy", claim)
    owned = claim is not None and claim["stack"] == args.stack
    previous = claim if not owned else None
    if previous is not None and not args.takeover:
        finish("held", claim)
    if claim is None or not owned:
        claim = {"stack": args.stack, "project": args.project, "claimed_at": stamp(), "server_pid": None}
    claim.update({"update_id": args.update_id, "updating_since": stamp()})
    folder.write(claim)
    guard.close()
    answer("acquired", claim, previous, updating=True)
    while True:
        ready, _, _ = select.select([0], [], [], args.silence_s)
        if not ready or not os.read(0, 4096):
            break
    guard = folder.lock_claim()  # held until the program ends
    current = folder.load()
    if current is not None and current["stack"] == args.stack and current.get("update_id") == args.update_id:
        current["updating_since"] = None
        folder.write(current)


def main(argv: list[str]) -> None:
    args = parse(argv)
    folder = Folder(args.folder, args.lock_wait_s)
    guard = folder.lock_claim()
    claim = folder.load()
    if args.op == "acquire":
        acquire(args, folder, guard, claim)
    else:
        owner_ops(args, folder, claim)


if __name__ == "__main__":
    main(sys.argv[1:])
