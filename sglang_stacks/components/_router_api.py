"""SGLang's router worker API as the fleet's resources use it: list the workers, find one by URL,
read the configuration each serves (a label given at registration), and wait for a replica's own
``/get_load`` to reach no request.
"""

from __future__ import annotations

import time
from typing import Any

POLL_S = 0.2
CONFIG_LABEL = "sglang_stacks_config"
"""The worker label (``labels`` of ``POST /workers``, listed in ``metadata``) that holds the digest
of the configuration the replica serves: the fleet's configuration as the router knows it."""


def workers(router_url: str) -> list[dict[str, Any]]:
    """The router's workers as ``GET /workers`` lists them."""
    import httpx  # where the router is talked to: a program that only declares resources never needs it

    answer = httpx.get(f"{router_url}/workers", timeout=10)
    answer.raise_for_status()
    listed: list[dict[str, Any]] = answer.json()["workers"]
    return listed


def listed(router_url: str, worker_url: str) -> dict[str, Any] | None:
    """The router's entry of ``worker_url``, or None when it is not in the router."""
    return next((w for w in workers(router_url) if w["url"].rstrip("/") == worker_url.rstrip("/")), None)


def worker_configs(router_url: str) -> dict[str, str]:
    """Per worker URL in the router, the configuration digest it was registered with ("" for a
    worker registered without one)."""
    listed = workers(router_url)
    return {w["url"].rstrip("/"): str((w.get("metadata") or {}).get(CONFIG_LABEL, "")) for w in listed}


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
