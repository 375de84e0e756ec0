"""The canary gate's reference: which replica of the router the canary is judged against, and its
trip out of the router while both are measured (and back into it, however the measurement ends).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from sglang_stacks.components.router import WorkerInputs, add_worker, drain_worker
from sglang_stacks.config.disaggregation import Role
from sglang_stacks.errors import BenchmarkError, RouterError
from sglang_stacks.hostops import lifetime, router_workers
from sglang_stacks.hostops.connection import Connection


@dataclass(frozen=True)
class Reference:
    """The replica the canary is measured beside, as the router lists it."""

    url: str
    config_digest: str
    """The configuration the router's label says it serves: its registration gets it back."""
    router_url: str


def _reachable(url: str) -> bool:
    import httpx  # the provider's own process: imported where it is used

    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _served(router_url: str, worker_type: str | None) -> dict[str, str]:
    """The router's workers (of ``worker_type`` only, when given) and the configuration digest each
    serves ({} without a router)."""
    import httpx

    try:
        return router_workers.worker_configs(router_url, worker_type) if router_url else {}
    except httpx.HTTPError:
        return {}


def pick_reference(
    router_url: str, canary_url: str, declared_url: str, config_digest: str, worker_type: str | None = None
) -> tuple[Reference | None, str]:
    """The replica to judge the canary against, or None and why there is nothing to judge.

    The declared reference first, then any other replica in the router: a dead reference must not
    let a regression through unjudged. A reference the router lists with the canary's own
    configuration (``config_digest``: a roll back, a restored stack file) means there is no change
    to judge, only the noise of two measurements. In a disaggregated fleet the reference is a
    worker of the canary's role (``worker_type``).
    """
    served = _served(router_url, worker_type)
    canary, declared = canary_url.rstrip("/"), declared_url.rstrip("/")
    others = [url for url in served if url not in (canary, declared)]
    for url in [declared, *others]:
        if url not in served or not _reachable(url):
            continue
        if config_digest and served[url] == config_digest:
            return None, "the canary runs the configuration the fleet serves: no change to judge"
        return Reference(url, served[url], router_url), ""
    return None, "no replica on the current configuration answered: nothing to compare with"


def _register(worker: WorkerInputs) -> None:
    """Puts the worker back in the router without waiting: what a process about to end can do."""
    import httpx

    registration = router_workers.Registration(
        url=worker.worker_url,
        config_digest=worker.config_digest,
        worker_type=worker.worker_type,
        bootstrap_port=worker.bootstrap_port,
    ).body()
    # When the router does not answer, the next refresh finds the registration missing and the next
    # `up` restores it.
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{worker.router_url}/workers", json=registration, timeout=10)


@contextlib.contextmanager
def out_of_router(
    reference: Reference,
    *,
    connection: Connection,
    canary_url: str,
    drain_timeout_s: float,
    stack: str,
    role: Role | None = None,
    bootstrap_port: int | None = None,
) -> Iterator[None]:
    """The reference out of the router, its requests finished, for the length of the block; then
    back in it with its label (listed healthy), however the block ends.

    Refused when no other replica would serve meanwhile (a host of the fleet is down): the fleet
    keeps serving, and the canary stays unjudged and out of the router.
    """
    import httpx

    router_url, canary = reference.router_url, canary_url.rstrip("/")
    try:
        listed = router_workers.workers(router_url)
    except httpx.HTTPError as error:
        raise RouterError(f"The router at {router_url} did not answer ({error}).", stack=stack) from None
    serving = [
        w["url"].rstrip("/")
        for w in listed
        if w.get("is_healthy")
        and w["url"].rstrip("/") not in (canary, reference.url)
        and (role is None or w.get("worker_type") == role)
    ]
    if not serving:
        other = "replica" if role is None else f"{role} worker"
        raise BenchmarkError(
            f"The canary of fleet {stack} is measured beside {reference.url} with both out of the "
            f"router, but no other {other} is in the router to serve meanwhile, so the canary was not "
            f"judged and stays out of it. Bring the fleet's other hosts back (`pulumi refresh -s "
            f"{stack}` shows which one is down), then run `pulumi up -s {stack}` again.",
            stack=stack,
        )
    worker = WorkerInputs(
        connection=connection,
        router_url=router_url,
        worker_url=reference.url,
        server_instance="",
        config_digest=reference.config_digest,
        drain_timeout_s=drain_timeout_s,
        worker_type=role or "regular",
        bootstrap_port=bootstrap_port,
    )
    out = threading.Event()
    # A killed update still puts the reference back: the engine's watch runs this before it ends
    # the provider.
    lifetime.on_engine_gone(lambda: _register(worker) if out.is_set() else None)
    out.set()
    try:
        drain_worker(worker, "")
        yield
    finally:
        try:
            add_worker(worker)
        except RouterError as error:
            raise RouterError(
                f"{error} The canary gate had taken {reference.url} out of the router to measure it; "
                f"`pulumi up -s {stack}` puts it back (a refresh sees it missing).",
                stack=stack,
            ) from None
        finally:
            out.clear()
