"""How long the work of an update lives on this machine: as long as the Pulumi engine that runs it.

The engine starts a provider process through a shell wrapper (``pulumi-resource-pulumi-python``)
and passes the engine's gRPC address as its first argument. A CLI that dies (``kill -9``, a second
Ctrl-C) leaves the wrapper and the provider behind, so neither the parent process nor the gRPC
server of the provider says the update is over; the engine's address does: it stops accepting
connections. `watch_engine` then lets go of what the process holds (the claim leases), stops its
child processes (SSH clients, local scripts) and ends the process, so each session closes and the
host programs bound to a session stop with it.

The watch starts with the provider process itself: the package installs a start hook
(``sglang_stacks-lifetime.pth``, written by ``setup.py``) that Python runs at the start of every
process of its environment, and that calls `watch_provider_process`. The engine may start a provider
process and never call it (it did so while replacing a resource): a watch begun only inside a
provider method would never begin there, and the process would wait for calls forever.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence

__all__ = [
    "engine_address",
    "engine_alive",
    "on_engine_gone",
    "update_alive",
    "watch_engine",
    "watch_provider_process",
]

PROVIDER_MODULE = "pulumi.dynamic"
"""The module the engine runs (``python -m pulumi.dynamic <engine address>``) for dynamic providers."""

# How often the watch asks whether the engine still listens; a killed CLI is noticed within this.
_POLL_S = 2.0
_ADDRESS = re.compile(r"^(127\.0\.0\.1|localhost|\[::1\]):(\d{1,5})$")

_callbacks: list[Callable[[], None]] = []
_lock = threading.Lock()
_watching = False
# The parent this process started with: the fallback when no engine address was passed.
_FIRST_PARENT = os.getppid()


def engine_address(argv: Sequence[str] | None = None) -> tuple[str, int] | None:
    """The engine's gRPC address from a provider process's arguments, or None outside one."""
    for arg in (sys.argv if argv is None else argv)[1:]:
        found = _ADDRESS.match(arg)
        if found:
            return found.group(1).strip("[]"), int(found.group(2))
    return None


def engine_alive(address: tuple[str, int]) -> bool:
    """Whether the engine at ``address`` still listens. Only a refused connection counts as gone:
    a busy machine may answer slowly, never with a refusal while the engine lives."""
    try:
        socket.create_connection(address, timeout=5).close()
    except ConnectionRefusedError:
        return False
    except OSError:
        return True
    return True


def update_alive() -> bool:
    """Whether the update this process works for still runs: its engine listens, or, in a process
    started without an engine address, its first parent is still its parent."""
    address = engine_address()
    if address is not None:
        return engine_alive(address)
    return os.getppid() == _FIRST_PARENT


def on_engine_gone(callback: Callable[[], None]) -> None:
    """Runs ``callback`` (before the process ends) once the engine is gone."""
    with _lock:
        if callback not in _callbacks:
            _callbacks.append(callback)


def watch_engine(argv: Sequence[str] | None = None) -> None:
    """Ends this process soon after its engine is gone; idempotent, and a no-op outside a process
    the engine started (tests, the companion CLI). ``argv``: the process's arguments, the module or
    program first (by default ``sys.argv``)."""
    global _watching
    address = engine_address(argv)
    with _lock:
        if _watching or address is None:
            return
        _watching = True
    threading.Thread(target=_watch, args=(address,), name="engine-watch", daemon=True).start()


def watch_provider_process(argv: Sequence[str] | None = None) -> None:
    """Watches the engine when this process is a dynamic-provider process (``argv``, by default the
    interpreter's own command line, runs ``-m pulumi.dynamic``); does nothing in any other process.
    Called by the package's start hook, before the provider module is even imported."""
    words = list(sys.orig_argv if argv is None else argv)
    if PROVIDER_MODULE not in words:
        return
    at = words.index(PROVIDER_MODULE)
    if at == 0 or words[at - 1] != "-m":
        return
    watch_engine(words[at:])


def _watch(address: tuple[str, int]) -> None:
    stop = threading.Event()
    while not stop.wait(_POLL_S):
        if not engine_alive(address):
            break
    with _lock:
        callbacks = list(_callbacks)
    for callback in callbacks:
        with contextlib.suppress(Exception):
            callback()
    _stop_children()
    os._exit(1)


def _stop_children() -> None:
    """Stops this process's child processes (SSH clients, local scripts): an SSH client whose
    remote side prints nothing would otherwise live on after this process."""
    me = str(os.getpid())
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = handle.read().rsplit(") ", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
            if parent == me:
                with contextlib.suppress(OSError):
                    os.kill(int(entry), signal.SIGTERM)
