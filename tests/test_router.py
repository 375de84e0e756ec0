"""The router provider on this machine, with the real sglang-router: where its log goes, and a
worker added twice (an interrupted create run again) registered once.

A whole fleet behind the router is in test_fleet.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_emulator import start_emulator
from sglang_stacks.components.router import (
    RouterInputs,
    RouterProvider,
    WorkerInputs,
    add_worker,
    start_router,
    stop_router,
)
from sglang_stacks.hostops import router_workers
from tests._router import local_router_props

pytestmark = pytest.mark.integration


def test_a_router_log_under_the_home_folder_is_written_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default router folder is ~/.sglang-stacks/router: ~/ is the host user's home.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # where a folder literally named ~ would appear
    props = local_router_props("~/router/baseline-router.log")
    provider = RouterProvider()

    created = provider.create(props)
    try:
        assert (tmp_path / "home" / "router" / "baseline-router.log").is_file()
        assert not (tmp_path / "~").exists()
    finally:
        provider.delete(created.id or "", {**props, **(created.outs or {})})


def test_a_worker_added_twice_is_registered_once(tmp_path: Path) -> None:
    # What makes a worker's interrupted create safe to run again (sglang-stacks recover clears it).
    router = RouterInputs.model_validate(local_router_props(str(tmp_path / "router.log")))
    started = start_router(router)
    try:
        flags = ["--model", "/shared/kimi-k2.5-int4", "--tp", "8"]
        with start_emulator(flags, state_dir=str(tmp_path / "gpus")) as replica:
            worker = WorkerInputs.model_validate(
                {
                    "connection": {"kind": "local"},
                    "router_url": started.url,
                    "worker_url": replica.base_url,
                    "server_instance": "first",
                    "config_digest": "c0ffee",
                }
            )
            first, again = add_worker(worker), add_worker(worker)

            assert again.worker_id == first.worker_id
            listed = router_workers.workers(started.url)
            assert [entry["url"] for entry in listed] == [replica.base_url]
            assert router_workers.worker_configs(started.url) == {replica.base_url: "c0ffee"}
    finally:
        stop_router(router, started.pid, started.start_ticks)
