"""The real Pulumi engine runs this project: preview, up, outputs, diff after a change, destroy."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from tests._pulumi import Workspace, pulumi_binary

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_cli_is_the_pinned_build() -> None:
    version = subprocess.run([pulumi_binary(), "version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() in {"v3.272.0", "v3.274.1"}


def test_preview_up_output_diff_destroy(workspace: Workspace) -> None:
    port, new_port = _free_port(), _free_port()
    workspace.init_stack("demo", f"config:\n  sglang-stacks:demoPort: {port}\n")

    preview = workspace.json("preview", "--json", "-s", "demo")
    assert preview["changeSummary"] == {"create": 2}
    assert not [d for d in preview.get("diagnostics", []) if "download" in d.get("message", "").lower()]

    up = workspace.run("up", "--yes", "-s", "demo")
    assert "warning" not in up.stdout.lower() + up.stderr.lower()
    outputs = workspace.outputs("demo")
    assert outputs["url"] == f"http://127.0.0.1:{port}/"
    assert _alive(outputs["pid"])

    workspace.run("config", "set", "demoPort", str(new_port), "-s", "demo")
    diff = workspace.json("preview", "--diff", "--json", "-s", "demo")
    steps = {step["urn"].rsplit("::", 1)[1]: step for step in diff["steps"]}
    assert steps["demo-http"]["op"] == "replace"
    assert "argv" in steps["demo-http"]["replaceReasons"]
    assert json.dumps(steps["demo-http"]["newState"]["inputs"]["argv"]).count(str(new_port)) == 1

    workspace.run("destroy", "--yes", "-s", "demo")
    assert not _alive(outputs["pid"])
    assert workspace.outputs("demo") == {}
