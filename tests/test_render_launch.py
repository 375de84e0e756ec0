"""What `sglang-stacks render` plans is what the emulated server does with the command it renders.

Variants of the shipped baseline (memory fraction, chunked prefill, CUDA-graph batch, EAGLE-3, two
releases) are rendered through the CLI as a user would, then launched as the emulator process with
that argv and the environment a deployment gives it: a plan that fits is a server that becomes
ready with the KV pool, chunk and running limit the plan printed; one that does not fit is a server
that stops with the message the plan printed.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_emulator.launcher import start_emulator
from sglang_stacks.cli import main
from sglang_stacks.config.stackfile import load_stack_spec
from tests._ports import free_port
from tests._stacks import STACKS_DIR

EAGLE3 = {
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 2,
    "speculative_eagle_topk": 4,
    "speculative_num_draft_tokens": 4,
}

# (release, server settings over the baseline's): the kind of variants, fitting and not.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "auto": ("0.5.8", {}),
    "0.775-graphs-32": ("0.5.8", {"mem_fraction_static": 0.775, "cuda_graph_max_bs": 32}),
    "0.90-chunk-16384": ("0.5.8", {"mem_fraction_static": 0.9, "chunked_prefill_size": 16384}),
    "auto-chunk-16384": ("0.5.8", {"chunked_prefill_size": 16384}),
    "0.70": ("0.5.8", {"mem_fraction_static": 0.7}),
    "0.99": ("0.5.8", {"mem_fraction_static": 0.99}),
    "eagle3-auto": ("0.5.8", {"cuda_graph_max_bs": 128, **EAGLE3}),
    "eagle3-auto-0.5.23": ("0.5.23", {"cuda_graph_max_bs": 128, **EAGLE3}),
}


def _stack(folder: Path, name: str, release: str, server: dict[str, Any], eagle: bool) -> None:
    document = yaml.safe_load((STACKS_DIR / "Pulumi.baseline.yaml").read_text(encoding="utf-8"))
    config = document["config"]
    config["sglang-stacks:environment"]["sglang_release"] = release
    config["sglang-stacks:server"].update(server)
    if eagle:
        draft = yaml.safe_load((STACKS_DIR / "Pulumi.eagle3-bs128.yaml").read_text(encoding="utf-8"))
        config["sglang-stacks:draftModel"] = draft["config"]["sglang-stacks:draftModel"]
    (folder / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def _outcome(server: Any, timeout_s: float = 60.0) -> str:
    """``ready`` once the server answers /health with 200, or ``exited`` when it stops first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return "exited"
        if server.wait_ready(0.5):
            return "ready"
    return "neither"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_rendered_plan_is_what_the_emulated_server_does(
    variant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release, server = VARIANTS[variant]
    _stack(tmp_path, variant, release, server, "speculative_algorithm" in server)
    main(["render", variant, "--json", "--stacks-dir", str(tmp_path)])
    document = json.loads(capsys.readouterr().out)
    plan, argv = document["memory"], list(document["argv"])
    assert plan["release"] == release and plan["verdict"] in ("fits", "does_not_fit")
    argv[argv.index("--host") + 1] = "127.0.0.1"
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    env = load_stack_spec(variant, tmp_path).environment.emulator.variables(release)
    del env["SGLANG_EMULATOR_TIME_SCALE"]  # the launcher's own: startup in a fraction of a second

    with start_emulator(argv, port=port, env=env, state_dir=str(tmp_path / "gpus"), wait=False) as running:
        outcome = _outcome(running)
        log = running.log()

    if plan["verdict"] == "fits":
        assert outcome == "ready", log
        pool = re.search(r"KV Cache is allocated\. #tokens: (\d+)", log)
        assert pool and int(pool.group(1)) == plan["max_total_num_tokens"], log
        assert f"chunked_prefill_size={plan['chunked_prefill_size']}," in log
        assert f"max_running_requests={plan['max_running_requests']}," in log
    else:
        assert outcome == "exited", log
        assert plan["failure"].split(" Current value")[0] in log, (plan["failure"], log)
