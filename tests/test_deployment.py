"""The whole deployment with the real Pulumi CLI, over a real OpenSSH server, in front of the
SGLang emulator: up, a second up that changes nothing, new emulator code, a new key, a new
workload, a replacement, a killed server relaunched, new draft-model content, destroy, a host that
is not what the stack declares, a server that fails to start or dies mid-benchmark, an update
killed after the launch, two racing updates (the suite's one drill of that race through the CLI;
tests/test_claim.py races the claim itself, at one instant, on both transports). The EAGLE-3
change's takeover and rollback are tests/test_campaign.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_stacks.config.spec import EMULATOR_HOST_FACTS
from tests._pulumi import ROOT, Workspace, emulator_stack, free_port, pulumi_binary
from tests.sshd import SshServer, new_key, start_sshd

pytestmark = pytest.mark.integration

DRAFT_SHA256 = "fbd5f417dc41ab67521f9f8ec82c37c42f8fb257591ffc10b2371bd10e116cf8"
EAGLE3_SERVER = (
    "    cuda_graph_max_bs: 128\n"
    "    mem_fraction_static: 0.88\n"
    "    speculative_algorithm: EAGLE\n"
    "    speculative_num_steps: 2\n"
    "    speculative_eagle_topk: 4\n"
    "    speculative_num_draft_tokens: 4\n"
)


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    with start_sshd() as server:
        yield server


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The results history the benchmarks of this test write to."""
    path = tmp_path / "history.sqlite"
    monkeypatch.setenv("SGLANG_STACKS_HISTORY", str(path))
    return path


@pytest.fixture
def ports() -> Iterator[list[int]]:
    """Server ports for the test; any emulator still serving on one of them is stopped after it."""
    taken: list[int] = []
    yield taken
    for port in taken:
        for pid in emulator_pids(port):
            os.kill(pid, signal.SIGKILL)


def change_emulator_code(workspace: Workspace) -> None:
    """The workspace's emulator becomes a copy of the project's with a comment added: new code that
    behaves the same, as after pulling a new version of the tool."""
    linked = workspace.path / "sglang_emulator"
    linked.unlink()
    shutil.copytree(ROOT / "sglang_emulator", linked, ignore=shutil.ignore_patterns("__pycache__"))
    with (linked / "__init__.py").open("a") as module:
        module.write("# A comment: the environment's digest changes, the emulator's behaviour does not.\n")


def new_port(ports: list[int]) -> int:
    port = free_port()
    ports.append(port)
    return port


def ssh_config(
    server: SshServer,
    state_dir: Path,
    *,
    port: int,
    eagle3: bool = False,
    emulator: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A stack's config for the emulator behind the test sshd: the baseline-bs128 launch, or with
    `eagle3` the campaign's EAGLE-3 change with the stand-in draft model uploaded over SSH."""
    facts = "".join(f"    {key}: {json.dumps(value)}\n" for key, value in EMULATOR_HOST_FACTS.items())
    host = (
        "  sglang-stacks:host:\n"
        "    kind: ssh\n"
        f"    address: {server.host}\n"
        f"    port: {server.port}\n"
        f"    user: {server.user}\n"
        f"    host_key: {server.host_key}\n"
        f"{facts}"
    )
    draft = (
        "  sglang-stacks:draftModel:\n"
        "    source: local\n"
        "    local_path: artifacts/eagle3-standin\n"
        f"    path_on_host: {state_dir}/draft/eagle3\n"
        f"    sha256: {DRAFT_SHA256}\n"
        "    weights_gb: 2.4\n"
    )
    text = emulator_stack(
        port=port,
        state_dir=state_dir,
        host=host,
        server=EAGLE3_SERVER if eagle3 else "    cuda_graph_max_bs: 128\n",
        draft=draft if eagle3 else "",
    )
    config: dict[str, Any] = yaml.safe_load(text)["config"]
    environment = config["sglang-stacks:environment"]
    environment["runtime"] = "emulator"
    environment["emulator"].update(emulator or {})
    return config


def write_config(workspace: Workspace, stack: str, config: dict[str, Any]) -> None:
    """Makes `config` the stack's config, keeping its encrypted SSH key."""
    path = workspace.path / "stacks" / f"Pulumi.{stack}.yaml"
    document = yaml.safe_load(path.read_text()) or {}
    secrets = {key: value for key, value in (document.get("config") or {}).items() if "sshPrivateKey" in key}
    document["config"] = {**config, **secrets}
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def new_stack(workspace: Workspace, stack: str, server: SshServer, config: dict[str, Any]) -> None:
    """Creates `stack` with `config` and the test sshd's client key as the secret sshPrivateKey."""
    workspace.init_stack(stack)
    workspace.run("config", "set", "--secret", "sshPrivateKey", "-s", stack, stdin=server.client_key)
    write_config(workspace, stack, config)


def resources(workspace: Workspace, stack: str) -> dict[str, dict[str, Any]]:
    """The stack's resources as its state holds them (secrets hidden), by resource name."""
    return {
        resource["urn"].rsplit("::", 1)[1]: resource.get("outputs", {})
        for resource in workspace.deployment(stack).get("resources") or []
    }


def emulator_pids(port: int) -> list[int]:
    """Emulated SGLang servers on this machine launched for `port`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sglang_emulator" in words and b"--port" in words and str(port).encode() in words:
            found.append(int(cmdline.parent.name))
    return found


def gpu_processes(state_dir: Path) -> set[int]:
    """The pids the emulator's nvidia-smi lists as holding GPU memory."""
    listed = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            "-m",
            "sglang_emulator.nvidia_smi",
            "--query-compute-apps=pid",
            "--format=csv,noheader",
        ],
        cwd=ROOT,
        env={**os.environ, "SGLANG_EMULATOR_STATE_DIR": str(state_dir / "gpus")},
        capture_output=True,
        text=True,
        check=True,
    )
    return {int(line) for line in listed.stdout.split()}


def claim_file(state_dir: Path) -> dict[str, Any] | None:
    path = state_dir / "host" / "claim.json"
    return json.loads(path.read_text()) if path.exists() else None


def serving_note(state_dir: Path) -> dict[str, Any] | None:
    """What the host says it serves (the note previews compare a stack's flags with)."""
    path = state_dir / "host" / "serving.json"
    return json.loads(path.read_text()) if path.exists() else None


def history_rows(path: Path, stack: str) -> int:
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        count: int = db.execute("SELECT COUNT(*) FROM results WHERE stack = ?", (stack,)).fetchone()[0]
    return count


def server_pid(workspace: Workspace, stack: str) -> int:
    return int(resources(workspace, stack)[f"{stack}-server"]["pid"])


def test_up_over_ssh_benchmarks_a_second_up_changes_nothing_and_destroy_leaves_nothing(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, history: Path, ports: list[int]
) -> None:
    port = new_port(ports)
    new_stack(workspace, "baseline", sshd, ssh_config(sshd, tmp_path, port=port))

    workspace.run("up", "--yes", "-s", "baseline")  # later ups skip the preview, to save time
    outputs = workspace.outputs("baseline")
    assert 70 < outputs["tok_s"] < 95
    assert outputs["sglang_version"] == "0.5.8"
    assert outputs["host"]["gpu_count"] == 8
    assert outputs["host"]["gpu_model"] == EMULATOR_HOST_FACTS["gpu_model"]
    assert "-m sglang_emulator " in outputs["launch_command"]
    assert "--cuda-graph-max-bs 128" in outputs["launch_command"]
    pid = server_pid(workspace, "baseline")
    assert emulator_pids(port) == [pid]
    assert history_rows(history, "baseline") == 1

    workspace.run("up", "--yes", "--expect-no-changes", "-s", "baseline")
    assert server_pid(workspace, "baseline") == pid
    assert history_rows(history, "baseline") == 1
    assert workspace.outputs("baseline")["tok_s"] == outputs["tok_s"]

    # New emulator code, the same configuration: only the environment changes. The preview cannot
    # know the environment's Python and release yet, and announces no new server or benchmark
    # (GPU time); the update indeed keeps the server and measures nothing again.
    change_emulator_code(workspace)
    preview = workspace.run("preview", "--diff", "-s", "baseline").stdout
    assert "baseline-environment" in preview, preview
    assert "replace" not in preview, preview
    assert "sglang:Server" not in preview and "sglang:Benchmark" not in preview, preview
    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")
    assert server_pid(workspace, "baseline") == pid
    assert history_rows(history, "baseline") == 1

    # A new key for the same host: the server keeps running and is not benchmarked again.
    rotated, rotated_public = new_key(tmp_path, "rotated")
    with (sshd.folder / "authorized_keys").open("a") as authorized:
        authorized.write(rotated_public + "\n")
    workspace.run("config", "set", "--secret", "sshPrivateKey", "-s", "baseline", stdin=rotated)
    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")
    assert server_pid(workspace, "baseline") == pid
    assert history_rows(history, "baseline") == 1
    exported = workspace.json("stack", "export", "--show-secrets", "-s", "baseline")
    server_state = next(
        r for r in exported["deployment"]["resources"] if r["urn"].endswith("::baseline-server")
    )
    assert server_state["outputs"]["connection"]["plaintext"].count(rotated.strip().splitlines()[1]) == 1

    # Another workload measures the same server again.
    longer = ssh_config(sshd, tmp_path, port=port)
    longer["sglang-stacks:benchmark"]["output_len"] = 64
    write_config(workspace, "baseline", longer)
    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")
    assert server_pid(workspace, "baseline") == pid
    assert workspace.outputs("baseline")["benchmark"]["output_len"] == 64
    assert history_rows(history, "baseline") == 2

    bs512 = ssh_config(sshd, tmp_path, port=port)
    bs512["sglang-stacks:server"]["cuda_graph_max_bs"] = 512
    write_config(workspace, "baseline", bs512)
    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")
    replaced = server_pid(workspace, "baseline")
    assert replaced != pid
    assert emulator_pids(port) == [replaced]
    assert gpu_processes(tmp_path) == {replaced}
    assert "--cuda-graph-max-bs 512" in workspace.outputs("baseline")["launch_command"]
    assert history_rows(history, "baseline") == 3

    # Neither key is in the deployed state, nor in any file of the backend (backups included).
    key_lines = [
        line
        for key in (sshd.client_key, rotated)
        for line in key.splitlines()
        if not line.startswith("-----")
    ]
    exported_text = workspace.run("stack", "export", "--show-secrets=false", "-s", "baseline").stdout
    assert '"baseline-server"' in exported_text or "::baseline-server" in exported_text
    assert not any(line in exported_text for line in key_lines)
    for state_file in workspace.backend.rglob("*"):
        if state_file.is_file():
            text = state_file.read_text(errors="replace")
            assert not any(line in text for line in key_lines), state_file

    workspace.run("destroy", "--yes", "-s", "baseline")
    assert emulator_pids(port) == []
    assert claim_file(tmp_path) is None
    assert serving_note(tmp_path) is None
    assert gpu_processes(tmp_path) == set()


def test_a_killed_server_is_noticed_by_refresh_and_relaunched_by_the_next_up(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, history: Path, ports: list[int]
) -> None:
    port = new_port(ports)
    new_stack(workspace, "baseline", sshd, ssh_config(sshd, tmp_path, port=port))
    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")
    pid = server_pid(workspace, "baseline")
    assert (claim_file(tmp_path) or {})["server_pid"] == pid

    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while emulator_pids(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    workspace.run("refresh", "--yes", "-s", "baseline")
    assert "baseline-server" not in resources(workspace, "baseline")
    assert serving_note(tmp_path) is None, "the host no longer says it serves the dead server"

    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")
    relaunched = server_pid(workspace, "baseline")
    assert relaunched != pid
    assert (serving_note(tmp_path) or {}).get("pid") == relaunched
    assert emulator_pids(port) == [relaunched]
    assert 70 < workspace.outputs("baseline")["tok_s"] < 95
    assert history_rows(history, "baseline") == 2

    # Every up refreshes first, so a plain `up` notices a dead server too.
    os.kill(relaunched, signal.SIGKILL)
    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")
    assert emulator_pids(port) == [server_pid(workspace, "baseline")] != [relaunched]
    assert history_rows(history, "baseline") == 3


def test_a_host_that_is_not_the_declared_one_stops_the_up_before_any_launch(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, history: Path, ports: list[int]
) -> None:
    port = new_port(ports)
    config = ssh_config(sshd, tmp_path, port=port, emulator={"profile": "h200-1gpu-llama-3.1-8b"})
    new_stack(workspace, "baseline", sshd, config)

    up = workspace.run("up", "--yes", "--skip-preview", "-s", "baseline", check=False)

    assert up.returncode != 0
    assert "host.gpu_count declares 8 GPUs but 1 found" in up.stdout
    assert "nothing was launched" in up.stdout
    assert emulator_pids(port) == []
    assert claim_file(tmp_path) is None, "the host is not claimed either"
    assert "baseline-server" not in resources(workspace, "baseline")
    assert history_rows(history, "baseline") == 0


def test_a_change_whose_server_fails_to_start_is_explained_and_baseline_rolls_back(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, history: Path, ports: list[int]
) -> None:
    port = new_port(ports)
    new_stack(workspace, "baseline", sshd, ssh_config(sshd, tmp_path, port=port))
    doomed = ssh_config(sshd, tmp_path, port=port, eagle3=True, emulator={"faults": {"port_in_use": True}})
    new_stack(workspace, "eagle3-bs128", sshd, doomed)
    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")
    baseline_pid = server_pid(workspace, "baseline")

    up = workspace.run("up", "--yes", "--skip-preview", "-s", "eagle3-bs128", check=False)

    assert up.returncode != 0
    assert "exited before it became ready (port_in_use)" in up.stdout
    assert "address already in use" in up.stdout
    assert f"Another process holds port {port} on the host" in up.stdout
    assert f"set server.port to a port other than {port} that is free" in up.stdout
    assert emulator_pids(port) == []
    assert "eagle3-bs128-server" not in resources(workspace, "eagle3-bs128")
    assert baseline_pid not in gpu_processes(tmp_path)
    assert serving_note(tmp_path) is None, "the host no longer says it serves the stopped baseline"

    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")
    assert emulator_pids(port) == [server_pid(workspace, "baseline")]
    assert (claim_file(tmp_path) or {})["stack"] == "baseline"


def test_of_two_updates_racing_for_one_host_one_wins_and_the_other_launches_nothing(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, history: Path, ports: list[int]
) -> None:
    port = new_port(ports)
    # A slow readiness keeps the winner's update running while the other reaches the claim.
    config = ssh_config(sshd, tmp_path, port=port, emulator={"faults": {"slow_readiness_s": 4}})
    stacks = ("baseline", "eagle3-bs128")
    for stack in stacks:
        new_stack(workspace, stack, sshd, config)

    racers = {
        stack: subprocess.Popen(
            [pulumi_binary(), "up", "--yes", "--non-interactive", "-s", stack],
            cwd=workspace.path,
            env=workspace.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for stack in stacks
    }
    try:
        outcomes = {
            stack: (racer.communicate(timeout=300)[0], racer.returncode) for stack, racer in racers.items()
        }
    finally:
        for racer in racers.values():
            if racer.poll() is None:
                racer.kill()

    winners = [stack for stack, (_, code) in outcomes.items() if code == 0]
    assert len(winners) == 1, outcomes
    winner, loser = winners[0], next(stack for stack in stacks if stack not in winners)
    assert f"this update of '{loser}' stops here and launches nothing" in outcomes[loser][0]
    assert f"Stack '{winner}' (update " in outcomes[loser][0]
    assert emulator_pids(port) == [server_pid(workspace, winner)]
    assert f"{loser}-server" not in resources(workspace, loser)
    assert [log.name.startswith(winner) for log in (tmp_path / "host" / "logs").iterdir()] == [True]
    assert (claim_file(tmp_path) or {})["stack"] == winner
    assert history_rows(history, loser) == 0

    # The loser's next `up` converges with no manual step: it takes the host over, one server.
    workspace.run("up", "--yes", "--skip-preview", "-s", loser)
    assert emulator_pids(port) == [server_pid(workspace, loser)]
    assert (claim_file(tmp_path) or {})["stack"] == loser
    assert history_rows(history, loser) == 1


def test_a_server_that_dies_during_the_benchmark_fails_the_up_and_records_no_number(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, history: Path, ports: list[int]
) -> None:
    port = new_port(ports)
    config = ssh_config(sshd, tmp_path, port=port, emulator={"faults": {"crash_after_requests": 2}})
    new_stack(workspace, "baseline", sshd, config)

    up = workspace.run("up", "--yes", "--skip-preview", "-s", "baseline", check=False)

    # The server's failure, named as such over SSH too: its class, its log's last lines, the fix.
    assert up.returncode != 0
    assert f"SGLang on {sshd.user}@{sshd.host}:{sshd.port} exited while it was being benchmarked (crash)" in (
        up.stdout
    )
    assert "Received sigquit from a child process" in up.stdout
    assert "`pulumi up -s baseline` then relaunches it" in up.stdout
    assert history_rows(history, "baseline") == 0
    assert "tok_s" not in workspace.outputs("baseline")


def test_new_draft_model_content_replaces_the_server_and_benchmarks_it_again(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, history: Path, ports: list[int]
) -> None:
    port = new_port(ports)
    draft = tmp_path / "eagle3-head"
    shutil.copytree(ROOT / "artifacts" / "eagle3-standin", draft)
    config = ssh_config(sshd, tmp_path, port=port, eagle3=True)
    config["sglang-stacks:draftModel"] = {**config["sglang-stacks:draftModel"], "local_path": str(draft)}
    del config["sglang-stacks:draftModel"]["sha256"]
    new_stack(workspace, "eagle3-bs128", sshd, config)
    workspace.run("up", "--yes", "--skip-preview", "-s", "eagle3-bs128")
    pid = server_pid(workspace, "eagle3-bs128")

    (draft / "README.md").write_text("retrained head\n")
    workspace.run("up", "--yes", "--skip-preview", "-s", "eagle3-bs128")

    relaunched = server_pid(workspace, "eagle3-bs128")
    assert relaunched != pid
    assert emulator_pids(port) == [relaunched]
    assert (tmp_path / "draft" / "eagle3" / "README.md").read_text() == "retrained head\n"
    assert history_rows(history, "eagle3-bs128") == 2


def test_an_update_killed_after_the_launch_leaves_a_server_the_next_up_replaces(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, history: Path, ports: list[int]
) -> None:
    port = new_port(ports)
    # A slow readiness keeps the update waiting on the launched server while it is killed.
    slow = ssh_config(sshd, tmp_path, port=port, emulator={"faults": {"slow_readiness_s": 30}})
    new_stack(workspace, "baseline", sshd, slow)
    update = subprocess.Popen(
        [pulumi_binary(), "up", "--yes", "--skip-preview", "--non-interactive", "-s", "baseline"],
        cwd=workspace.path,
        env=workspace.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not emulator_pids(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    left_behind = emulator_pids(port)
    assert len(left_behind) == 1
    # Everything of the update dies at once, as when its machine goes down: the CLI and the
    # program and provider processes it started (each in a process group of its own).
    update.kill()
    update.wait()
    for pid in processes_under(workspace.path):
        os.kill(pid, signal.SIGKILL)

    workspace.run("cancel", "--yes", "-s", "baseline")
    write_config(workspace, "baseline", ssh_config(sshd, tmp_path, port=port))
    workspace.run("up", "--yes", "--skip-preview", "-s", "baseline")

    assert emulator_pids(port) == [server_pid(workspace, "baseline")] != left_behind
    assert 70 < workspace.outputs("baseline")["tok_s"] < 95


def processes_under(folder: Path) -> list[int]:
    """Processes whose command line names a file in `folder` (the project's program and provider)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if str(folder).encode() in text and int(cmdline.parent.name) != os.getpid():
            found.append(int(cmdline.parent.name))
    return found
