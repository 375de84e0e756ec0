"""A disaggregated fleet behind the canary gate, per role, with the real Pulumi CLI, SGLang's real
router and `sglang-stacks rollout`: three prefill and three decode emulator workers (the demo-pd
stack's model and flags, `prefill.workers: 3`, `rollout.canary: true`). A change to the decode role
is judged on the first decode worker, paired with a prefill worker behind a router of the gate's
own, beside the second decode worker paired the same way, while clients send requests: a neutral
change rolls to every decode worker and a slower one is caught and rolled back, with no failed
request, and the prefill workers are never touched.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests._pulumi import Workspace, free_port, shipped_stack_config
from tests._router import Load

pytestmark = pytest.mark.integration

STACK = "pd-canary"
HOSTS = 6


def canary_config(folder: Any) -> str:
    """demo-pd's config on six emulator hosts (three of each role, counted), with the canary on."""
    document = yaml.safe_load(shipped_stack_config("demo-pd", folder))
    fleet = document["config"]["sglang-stacks:fleet"]
    fleet["hosts"] = [
        {
            "kind": "emulator",
            "server_port": free_port(),
            "bootstrap_port": free_port(),
            "state_dir": f"{folder}/host{index}",
        }
        for index in range(HOSTS)
    ]
    fleet["disaggregation"]["prefill"]["workers"] = 3
    fleet["rollout"] = {"canary": True, "tok_s_tolerance_pct": 5}
    # Six servers start one after another: each loads its weights 500 times faster than a real one.
    document["config"]["sglang-stacks:environment"]["emulator"]["time_scale"] = 0.002
    text: str = yaml.safe_dump(document, sort_keys=False)
    return text


class Fleet:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.path = workspace.path / "stacks" / f"Pulumi.{STACK}.yaml"

    def fleet(self) -> dict[str, Any]:
        found: dict[str, Any] = yaml.safe_load(self.path.read_text())["config"]["sglang-stacks:fleet"]
        return found

    @property
    def router(self) -> str:
        return f"http://127.0.0.1:{self.fleet()['router']['port']}"

    def urls(self, hosts: range) -> list[str]:
        return [f"http://127.0.0.1:{self.fleet()['hosts'][i]['server_port']}" for i in hosts]

    def served(self, name: str, hosts: range) -> list[Any]:
        return [httpx.get(f"{url}/get_server_info", timeout=10).json()[name] for url in self.urls(hosts)]

    def decode_workers(self) -> list[str]:
        listed = httpx.get(f"{self.router}/workers", timeout=10).json()["workers"]
        return sorted(w["url"] for w in listed if w["worker_type"] == "decode" and w["is_healthy"])

    def set_decode(self, **flags: Any) -> None:
        document = yaml.safe_load(self.path.read_text())
        document["config"]["sglang-stacks:fleet"]["disaggregation"]["decode"]["server"].update(flags)
        self.path.write_text(yaml.safe_dump(document, sort_keys=False))


PREFILL, DECODE = range(3), range(3, 6)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("pd-canary")
    workspace = Workspace.create(folder)
    workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(folder / "history.sqlite")
    workspace.init_stack(STACK, canary_config(folder))
    try:
        workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
        yield Fleet(workspace)
    finally:
        workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, check=False, timeout_s=600)


def test_a_decode_change_is_judged_in_pairs_and_rolls_to_every_decode_worker_under_load(fleet: Fleet) -> None:
    before = fleet.workspace.server_pids(STACK)
    fleet.set_decode(max_running_requests=128)
    previewed = fleet.workspace.run("preview", "--diff", "-s", STACK)
    preview = previewed.stdout + previewed.stderr
    assert preview.count("~ --max-running-requests 256 => 128") == 3, preview
    assert preview.count("(decode worker, the local host, ") == 3
    assert preview.count("(prefill worker, the local host, ") == 3
    assert preview.count("unchanged (serves pd-canary with the same launch flags)") == 3

    with Load(fleet.router) as load:
        time.sleep(1)
        fleet.workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
        time.sleep(1)

    assert load.failed == [], load.none_failed()
    assert load.ok > 10
    after = fleet.workspace.server_pids(STACK)
    assert [after[i] for i in PREFILL] == [before[i] for i in PREFILL]  # the prefill workers kept serving
    assert all(after[i] != before[i] for i in DECODE)
    assert fleet.served("max_running_requests", DECODE) == [128, 128, 128]
    assert fleet.decode_workers() == sorted(fleet.urls(DECODE))
    verdicts = fleet.workspace.outputs(STACK)["role_canaries"]
    decode = verdicts["decode"]
    # Judged: the canary's pair against the reference's, both measured, within the tolerance.
    assert decode["passed"] and decode["canary_tok_s"] and decode["reference_tok_s"], decode
    assert decode["line"].endswith("within the 5 % tolerance"), decode


def test_a_slower_decode_change_is_caught_by_its_canary_and_rolled_back_the_prefill_untouched(
    fleet: Fleet,
) -> None:
    before = fleet.workspace.server_pids(STACK)
    fleet.set_decode(disable_cuda_graph=True)

    with Load(fleet.router) as load:
        time.sleep(1)
        rolled = fleet.workspace.cli("rollout", STACK, timeout_s=1200)
        time.sleep(1)

    said = rolled.stdout + rolled.stderr
    assert rolled.returncode == 1, said
    caught = re.search(
        r"The decode workers' canary of fleet pd-canary regressed: canary ([0-9.]+) tok/s", said
    )
    assert caught, said
    assert "rolled back: all 6 replicas serve the configuration of the update of" in said, said
    assert load.failed == [], load.none_failed()
    after = fleet.workspace.server_pids(STACK)
    assert [after[i] for i in PREFILL] == [before[i] for i in PREFILL]  # the other role untouched
    assert after[3] != before[3] and (after[4], after[5]) == (before[4], before[5])  # only the canary
    assert fleet.served("disable_cuda_graph", DECODE) == [False, False, False]
    assert fleet.decode_workers() == sorted(fleet.urls(DECODE))
