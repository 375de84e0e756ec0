"""The inputs of a fleet's router on this machine, with the real sglang-router of the project's
environment: shared by the tests that start one."""

from __future__ import annotations

import sys
from importlib.metadata import version
from typing import Any

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
