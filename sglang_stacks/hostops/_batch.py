"""Scripts of one host that a process runs at about the same time, gathered into one session.

Pulumi asks a provider process to read every resource of a stack at once (a refresh, which
``refresh: always`` runs before every preview and update), each resource on a thread of its own.
Inside `gathering()` (the providers' ``read``), a script without stdin joins the batch of its
host; the first one to join waits until no other has joined for `_QUIET_S`, then runs them all
as one script in one session: one round trip to the host instead of one per resource. On the
host the scripts run side by side, each under its own ``timeout``, their output kept apart.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection

# Seconds without a new script after which a batch runs; the reads of one refresh reach the
# provider within milliseconds of each other once its modules are imported.
_QUIET_S = 0.1
# Seconds a batch waits at most for more scripts.
_MAX_WAIT_S = 0.5

Execute = Callable[[str, float], tuple[int, str, str]]
"""Runs a script on the host with a time limit: (exit code, stdout, stderr)."""


@dataclass
class _Request:
    script: str
    timeout_s: float
    done: threading.Event = field(default_factory=threading.Event)
    answer: tuple[int, str, str, float] | None = None
    error: BaseException | None = None


@dataclass
class _Batch:
    requests: list[_Request] = field(default_factory=list)
    last_join: float = field(default_factory=time.monotonic)


_lock = threading.Lock()
_open: dict[Connection, _Batch] = {}
_local = threading.local()


@contextlib.contextmanager
def gathering() -> Iterator[None]:
    """Scripts this thread runs without stdin inside the block may share a session with others'."""
    previous = getattr(_local, "on", False)
    _local.on = True
    try:
        yield
    finally:
        _local.on = previous


def active() -> bool:
    """Whether this thread is inside `gathering()`."""
    return bool(getattr(_local, "on", False))


def run(conn: Connection, script: str, timeout_s: float, execute: Execute) -> tuple[int, str, str, float]:
    """Runs ``script`` in its host's batch: (exit code, stdout, stderr, seconds the batch took).

    ``execute`` runs the combined script when this call is the one that starts the batch.
    """
    request = _Request(script, timeout_s)
    with _lock:
        batch = _open.get(conn)
        leader = batch is None
        if batch is None:
            batch = _open[conn] = _Batch()
        batch.requests.append(request)
        batch.last_join = time.monotonic()
    if leader:
        _lead(conn, batch, execute)
    request.done.wait()
    if request.error is not None:
        raise request.error
    assert request.answer is not None
    return request.answer


def _lead(conn: Connection, batch: _Batch, execute: Execute) -> None:
    started = time.monotonic()
    while True:
        time.sleep(_QUIET_S / 2)
        with _lock:
            now = time.monotonic()
            if now - batch.last_join >= _QUIET_S or now - started >= _MAX_WAIT_S:
                del _open[conn]
                break
    requests = batch.requests
    try:
        answers = _run_together(requests, execute)
    except BaseException as error:  # every script of the batch fails the way the session did
        for request in requests:
            request.error = error
            request.done.set()
        raise
    for request, answer in zip(requests, answers, strict=True):
        request.answer = answer
        request.done.set()


def _run_together(requests: list[_Request], execute: Execute) -> list[tuple[int, str, str, float]]:
    """Runs the scripts side by side in one session and splits what each printed."""
    marker = "__sglang_stacks_part_" + os.urandom(6).hex()
    limit_s = max(request.timeout_s for request in requests) + 10
    started = time.monotonic()
    code, stdout, stderr = execute(_combined(requests, marker), limit_s)
    elapsed_s = time.monotonic() - started
    parts: dict[int, tuple[int, str, str]] = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) == 5 and words[0] == marker:
            # Each output is "-" and its base64, so an empty one is still a word.
            out, err = (base64.b64decode(word[1:]).decode(errors="replace") for word in words[3:])
            parts[int(words[1])] = (int(words[2]), out, err)
    if len(parts) != len(requests):
        raise HostError(
            f"The host's answer to {len(requests)} gathered reads was cut short (exit {code}): "
            f"{stderr.strip()[-300:] or 'no output'}. Run the command again."
        )
    return [(*parts[index], elapsed_s) for index in range(len(requests))]


def _combined(requests: list[_Request], marker: str) -> str:
    """One bash script that runs each request's script under its own ``timeout`` in the
    background, waits for all, then prints each one's exit code and outputs (base64) on a line."""
    lines = ["folder=$(mktemp -d)", "trap 'rm -rf \"$folder\"' EXIT"]
    for index, request in enumerate(requests):
        # The script travels in a variable and reaches bash through a pipe, as the bootstrap
        # does: never on a command line, where `ps` would show it.
        lines += [
            f"script_{index}={shlex.quote(request.script)}",
            f"timeout -k 5 {request.timeout_s:g} bash <(printf '%s' \"$script_{index}\") "
            f'>"$folder/{index}.out" 2>"$folder/{index}.err" </dev/null &',
            f"pid_{index}=$!",
        ]
    for index in range(len(requests)):
        lines += [
            f"wait $pid_{index}; code=$?",
            f"printf '{marker} {index} %s %s %s\\n' \"$code\" "
            f'"-$(base64 -w0 <"$folder/{index}.out")" "-$(base64 -w0 <"$folder/{index}.err")"',
        ]
    return "\n".join(lines) + "\n"
