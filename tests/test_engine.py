"""The real Pulumi engine runs this project: preview, up, outputs, diff after a change, destroy."""

from __future__ import annotations

import json
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
    token = "hf_test_" + "x7" * 12
    workspace.run("config", "set", "--secret", "hubToken", token, "-s", "demo")

    preview = workspace.json("preview", "--json", "-s", "demo")
    assert preview["changeSummary"]["create"] >= 6
    messages = " ".join(d.get("message", "") for d in preview.get("diagnostics", []))
    assert "download" not in messages.lower()

    up = workspace.run("up", "--yes", "-s", "demo")
    assert "warning" not in up.stdout.lower() + up.stderr.lower()
    outputs = workspace.outputs("demo")
    # What the tests read from the backend's file is what `pulumi stack output` prints.
    assert outputs == workspace.json("stack", "output", "--json", "-s", "demo")
    assert outputs["sglang_version"] == "0.5.8"
    assert outputs["launch_flags"]["cuda_graph_max_bs"] == 128
    assert 70 < outputs["tok_s"] < 95

    # The hub token reaches the server's environment, and nowhere else in plain text.
    pid = json.loads((tmp_path / "host" / "serving.json").read_text())["pid"]
    assert f"HF_TOKEN={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    assert token not in Path(f"/proc/{pid}/cmdline").read_text()
    assert token not in outputs["launch_command"]
    for file in workspace.backend.rglob("*"):
        assert not file.is_file() or token.encode() not in file.read_bytes(), file

    workspace.run("config", "set", "--path", "server.cuda_graph_max_bs", "512", "-s", "demo")
    diff = workspace.json("preview", "--diff", "--json", "-s", "demo")
    server = next(
        step for step in diff["steps"] if step["urn"].endswith("::demo-server") and step["op"] != "refresh"
    )
    assert server["op"] == "replace"
    assert "flags" in server["replaceReasons"]
    assert server["newState"]["inputs"]["flags"]["cuda_graph_max_bs"] == 512

    workspace.run("destroy", "--yes", "-s", "demo")
    assert workspace.outputs("demo") == {}
    assert not (tmp_path / "host" / "claim.json").exists()
