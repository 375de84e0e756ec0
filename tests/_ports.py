"""Ports for the servers the tests start.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from its ephemeral range, where the
Pulumi engine, its plugins and every outgoing connection take ports all the time: one of them could
take the port before the server it was chosen for starts. So ports come from below that range, each
parallel test worker (pytest-xdist) has a stripe of its own, and no port is handed out twice.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_LOWEST = 10000
_given: set[int] = set()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _stripe() -> range:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    width = (_ephemeral_start() - _LOWEST) // max(workers, 1)
    start = _LOWEST + worker * width
    return range(start, start + width)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now, from this worker's stripe, not given before."""
    stripe = _stripe()
    for _ in range(1000):
        port = random.choice(stripe)
        if port in _given:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise AssertionError(f"No free port in {stripe.start}-{stripe.stop - 1} after 1000 tries.")


def free_ports_in_a_row(count: int) -> int:
    """The first of ``count`` consecutive free ports (a fleet on a cluster serves replica i on
    ``server.port + i``), none given before."""
    stripe = _stripe()
    for _ in range(1000):
        first = random.choice(range(stripe.start, stripe.stop - count))
        ports = range(first, first + count)
        if any(port in _given for port in ports):
            continue
        free = True
        for port in ports:
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    free = False
                    break
        if free:
            _given.update(ports)
            return first
    raise AssertionError(f"No {count} free ports in a row in {stripe.start}-{stripe.stop - 1}.")
