"""SGLang's router worker API, as a fleet uses it: list the workers, find one by URL, read the
configuration each serves (a label given at registration), add a replica and wait until it is
listed healthy, drain one (out of the router, then its own ``/get_load`` down to no request).

The router process itself is ``programs/router.sh`` (its contract: ``router_contract``).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import ConfigDict

from sglang_stacks.errors import RouterError
from sglang_stacks.shape import Shape

__all__ = [
    "CONFIG_LABEL",
    "POLL_S",
    "Registration",
    "add",
    "drain",
    "listed",
    "wait_idle",
    "worker_configs",
    "workers",
]

POLL_S = 0.2
CONFIG_LABEL = "sglang_stacks_config"
"""The worker label (``labels`` of ``POST /workers``, listed in ``metadata``) that holds the digest
of the configuration the replica serves: the fleet's configuration as the router knows it."""


def workers(router_url: str) -> list[dict[str, Any]]:
    """The router's workers as ``GET /workers`` lists them."""
    import httpx  # where the router is talked to: a program that only declares resources never needs it

    answer = httpx.get(f"{router_url}/workers", timeout=10)
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()["workers"]
    return found


def listed(router_url: str, worker_url: str) -> dict[str, Any] | None:
    """The router's entry of ``worker_url``, or None when it is not in the router."""
    return next((w for w in workers(router_url) if w["url"].rstrip("/") == worker_url.rstrip("/")), None)


def worker_configs(router_url: str, worker_type: str | None = None) -> dict[str, str]:
    """Per worker URL in the router (of ``worker_type`` only, when given: a router in PD mode lists
    prefill and decode workers), the configuration digest it was registered with ("" for a worker
    registered without one)."""
    return {
        w["url"].rstrip("/"): str((w.get("metadata") or {}).get(CONFIG_LABEL, ""))
        for w in workers(router_url)
        if worker_type is None or w.get("worker_type") == worker_type
    }


class Registration(Shape):
    """A worker as ``POST /workers`` registers it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    """The worker's URL as the router reaches it."""
    config_digest: str = ""
    """The configuration it serves ("" for none), kept as the worker's `CONFIG_LABEL` label."""
    worker_type: Literal["regular", "prefill", "decode"] = "regular"
    """Whole requests, or in a router in PD mode one half of each."""
    bootstrap_port: int | None = None
    """A prefill worker's bootstrap port, passed on to the decode worker of each request."""

    def body(self) -> dict[str, Any]:
        """The JSON body of ``POST /workers``."""
        labels = {CONFIG_LABEL: self.config_digest} if self.config_digest else {}
        body: dict[str, Any] = {"url": self.url, "labels": labels}
        if self.worker_type != "regular":
            body["worker_type"] = self.worker_type
        if self.bootstrap_port is not None:
            body["bootstrap_port"] = self.bootstrap_port
        return body


def add(router_url: str, registration: Registration, ready_timeout_s: float) -> str:
    """Registers the worker and waits until the router lists it healthy; its worker id."""
    import httpx

    worker_url = registration.url
    try:
        _refuse_the_wrong_role(registration)
        answer = httpx.post(f"{router_url}/workers", json=registration.body(), timeout=30)
        if answer.status_code >= 400:
            raise RouterError(
                f"The router at {router_url} refused worker {worker_url} "
                f"(HTTP {answer.status_code}: {answer.text.strip()[:300]})."
            )
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            found = listed(router_url, worker_url)
            if found is not None and found.get("is_healthy"):
                return str(found["id"])
            time.sleep(POLL_S)
    except httpx.HTTPError as error:
        raise RouterError(
            f"The router at {router_url} did not answer ({error}); `pulumi refresh` notices a router "
            "that died, and the next `pulumi up` starts it again."
        ) from None
    raise RouterError(
        f"The router did not list {worker_url} healthy within {ready_timeout_s:g} s. Check that the "
        "router's machine reaches the replica's address and port."
    )


def _refuse_the_wrong_role(registration: Registration) -> None:
    """RouterError when a prefill or decode registration names a server launched in another role:
    the router pairs workers by what they are registered as and never asks them."""
    import httpx

    if registration.worker_type == "regular":
        return
    info = httpx.get(f"{registration.url}/server_info", timeout=10).json()
    mode = str(info.get("disaggregation_mode") or "null")
    if mode != registration.worker_type:
        served = "an aggregated server" if mode == "null" else f"a {mode} worker"
        raise RouterError(
            f"The server at {registration.url} runs as {served} (--disaggregation-mode {mode}), but the"
            f" fleet registers it as a {registration.worker_type} worker; relaunch it with the fleet's flags "
            "(`pulumi up` replaces it) or fix the host's role in fleet.hosts."
        )


def drain(router_url: str, worker_url: str, drain_timeout_s: float) -> None:
    """Takes the replica out of the router, then waits until it has answered every request it had.

    The router stops sending new requests once the worker is unlisted; requests already routed
    finish on the replica, which ``/get_load`` counts (SGLang's per-rank ``num_reqs``).
    """
    import httpx

    try:
        found = listed(router_url, worker_url)
        if found is not None:
            httpx.delete(f"{router_url}/workers/{found['id']}", timeout=30).raise_for_status()
        deadline = time.monotonic() + drain_timeout_s
        while listed(router_url, worker_url) is not None:
            if time.monotonic() > deadline:
                raise RouterError(
                    f"The router still lists {worker_url} {drain_timeout_s:g} s after its removal; "
                    "check the router's log."
                )
            time.sleep(POLL_S)
    except httpx.HTTPError:
        pass  # a router that is gone sends the replica nothing more
    wait_idle(worker_url, time.monotonic() + drain_timeout_s)


def wait_idle(worker_url: str, deadline: float) -> None:
    """Waits until the replica reports no running or waiting request, or is gone."""
    import httpx

    while time.monotonic() < deadline:
        try:
            answer = httpx.get(f"{worker_url}/get_load", timeout=5)
            if answer.status_code == 404:
                return  # a release without /get_load: nothing to wait on
            ranks = answer.json()
            if sum(int(r.get("num_reqs", 0)) + int(r.get("num_waiting_reqs", 0)) for r in ranks) == 0:
                return
        except (httpx.HTTPError, ValueError):
            return  # the replica is gone: nothing of it is left to wait for
        time.sleep(POLL_S)
