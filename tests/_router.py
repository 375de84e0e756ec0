"""The inputs of a fleet's router on this machine, with the real sglang-router of the project's
environment, and a client load through a router: shared by the tests that start one."""

from __future__ import annotations

import sys
import threading
from importlib.metadata import version
from typing import Any

import httpx

from tests._ports import free_port


def local_router_props(log_path: str) -> dict[str, Any]:
    """A router's inputs (as the provider takes them) on free ports here, logging to ``log_path``."""
    return {
        "connection": {"kind": "local"},
        "python": sys.executable,
        "release": version("sglang-router"),
        "host": "127.0.0.1",
        "port": free_port(),
        "metrics_port": free_port(),
        "policy": "round_robin",
        "health_check_interval_s": 10,
        "log_path": log_path,
    }


class Load:
    """Requests sent one after another through the router by two clients, counted: what a fleet's
    users see while it rolls."""

    def __init__(self, url: str) -> None:
        self.url, self.ok = url, 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, daemon=True) for _ in range(2)]

    def _send(self) -> None:
        body = {"text": "hello " * 8, "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}}
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                try:
                    answer = client.post(f"{self.url}/generate", json=body)
                    if answer.status_code == 200:
                        self.ok += 1
                    else:
                        self.failed.append(f"HTTP {answer.status_code}: {answer.text[:200]}")
                except httpx.HTTPError as error:
                    self.failed.append(repr(error))

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def none_failed(self) -> str:
        """The assertion message when a request failed ("" when none did)."""
        return f"{len(self.failed)} failed of {self.ok + len(self.failed)}: {self.failed[:3]}"
