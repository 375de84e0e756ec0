"""The router provider on this machine, with the real sglang-router: where its log goes.

A whole fleet behind the router is in test_fleet.
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from sglang_stacks.components.router import RouterProvider
from tests._pulumi import free_port

pytestmark = pytest.mark.integration


def test_a_router_log_under_the_home_folder_is_written_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default router folder is ~/.sglang-stacks/router: ~/ is the host user's home.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # where a folder literally named ~ would appear
    props = {
        "connection": {"kind": "local"},
        "python": sys.executable,
        "release": version("sglang-router"),
        "host": "127.0.0.1",
        "port": free_port(),
        "metrics_port": free_port(),
        "policy": "round_robin",
        "health_check_interval_s": 10,
        "log_path": "~/router/baseline-router.log",
    }
    provider = RouterProvider()

    created = provider.create(props)
    try:
        assert (tmp_path / "home" / "router" / "baseline-router.log").is_file()
        assert not (tmp_path / "~").exists()
    finally:
        provider.delete(created.id or "", {**props, **(created.outs or {})})
