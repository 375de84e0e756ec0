"""The canary gate of a disaggregated fleet: a prefill or decode worker serves only in a pair, so the
canary and its reference (two workers of the changed role) are each paired with the same worker of
the other role (the partner, which keeps serving the fleet's router) behind a router of their own
in PD mode, started for the measurement on the fleet router's machine and stopped after it. Both
pairs are measured at the same moment, through the same kind of router, with the same partner:
what differs is the changed role's configuration.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass

from sglang_stacks.components.router import RouterInputs, WorkerInputs, add_worker, start_router, stop_router
from sglang_stacks.config.disaggregation import Role
from sglang_stacks.hostops.connection import Connection

__all__ = ["PairRouters", "PairedWorker", "paired_routers"]


@dataclass(frozen=True)
class PairedWorker:
    """A worker of a pair: where it serves, its role, and a prefill worker's bootstrap port."""

    url: str
    role: Role
    bootstrap_port: int | None = None


@dataclass(frozen=True)
class PairRouters:
    """Where the gate starts its routers: the fleet router's machine, Python and release."""

    connection: Connection
    python: str
    release: str
    state_dir: str


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def _pair(where: PairRouters, side: str, worker: PairedWorker, partner: PairedWorker) -> Iterator[str]:
    """A router in PD mode with ``worker`` and ``partner`` in it, for the block; its URL."""
    inputs = RouterInputs(
        connection=where.connection,
        python=where.python,
        release=where.release,
        host="127.0.0.1",
        port=_free_port(),
        metrics_port=_free_port(),
        policy="round_robin",
        health_check_interval_s=1,
        log_path=f"{where.state_dir.rstrip('/')}/canary-gate/{side}-router.log",
        pd_disaggregation=True,
    )
    started = start_router(inputs)
    try:
        for member in (partner, worker):
            add_worker(
                WorkerInputs(
                    connection=where.connection,
                    router_url=started.url,
                    worker_url=member.url,
                    server_instance="",
                    worker_type=member.role,
                    bootstrap_port=member.bootstrap_port,
                )
            )
        yield started.url
    finally:
        stop_router(inputs, started.pid, started.start_ticks)


@contextlib.contextmanager
def paired_routers(
    where: PairRouters, canary: PairedWorker, reference: PairedWorker, partner: PairedWorker
) -> Iterator[tuple[str, str]]:
    """The canary's pair and the reference's pair, each behind a router of its own, for the block:
    the two routers' URLs."""
    with (
        _pair(where, "canary", canary, partner) as canary_url,
        _pair(where, "reference", reference, partner) as reference_url,
    ):
        yield canary_url, reference_url
