"""The real Pulumi engine runs this project: preview, up, outputs, diff after a change, destroy."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests._pulumi import Workspace, emulator_stack, free_port, pulumi_binary

pytestmark = pytest.mark.integration


def test_cli_is_the_pinned_build() -> None:
    version = subprocess.run([pulumi_binary(), "version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() in {"v3.272.0", "v3.274.1"}


def test_preview_up_output_diff_destroy(workspace: Workspace, tmp_path: Path) -> None:
    port = free_port()
    workspace.init_stack("demo", emulator_stack(port=port, state_dir=tmp_path))

    preview = workspace.json("preview", "--json", "-s", "demo")
    assert preview["changeSummary"]["create"] >= 6
    messages = " ".join(d.get("message", "") for d in preview.get("diagnostics", []))
    assert "download" not in messages.lower()

    up = workspace.run("up", "--yes", "-s", "demo")
    assert "warning" not in up.stdout.lower() + up.stderr.lower()
    outputs = workspace.outputs("demo")
    assert outputs["sglang_version"] == "0.5.8"
    assert outputs["launch_flags"]["--cuda-graph-max-bs"] == "128"
    assert 70 < outputs["tok_s"] < 95

    workspace.run("config", "set", "--path", "server.cuda_graph_max_bs", "512", "-s", "demo")
    diff = workspace.json("preview", "--diff", "--json", "-s", "demo")
    server = next(
        step for step in diff["steps"] if step["urn"].endswith("::demo-server") and step["op"] != "refresh"
    )
    assert server["op"] == "replace"
    assert "flags" in server["replaceReasons"]
    assert server["newState"]["inputs"]["flags"]["--cuda-graph-max-bs"] == "512"

    workspace.run("destroy", "--yes", "-s", "demo")
    assert workspace.outputs("demo") == {}
    assert not (tmp_path / "host" / "claim.json").exists()
