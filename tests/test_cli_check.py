"""`sglang-stacks check [stack]`: the setup and a stack checked in seconds, each problem with its fix,
the exit code saying which kind of problem there is."""

from __future__ import annotations

import os
import socket
import subprocess

from tests._pulumi import Workspace

SERVER = "  sglang-stacks:server: {tp_size: 2, disable_custom_all_reduce: true}\n"
MODEL = "  sglang-stacks:model: {path: /models/m, weights_per_gpu_gb: 20}\n"


def test_a_good_setup_and_stack_pass_every_check(workspace: Workspace) -> None:
    workspace.init_stack("good", "config:\n  sglang-stacks:host: {kind: emulator}\n" + MODEL + SERVER)
    done = workspace.cli("check", "good")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0].split(None, 1)[1] for line in lines] == [
        "Pulumi CLI", "backend", "passphrase", "stack good", "update lock", "preflight", "host",
    ]  # fmt: skip
    assert all(line.startswith("  ok") for line in lines)
    assert (
        "1 stack(s) of this project" in done.stdout
        and "your own, from PULUMI_CONFIG_PASSPHRASE" in done.stdout
    )


def test_a_stack_preflight_refuses_or_whose_host_does_not_answer_fails_with_the_fix(
    workspace: Workspace,
) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    facts = "gpu_model: NVIDIA RTX PRO 6000 Blackwell Server Edition, gpu_count: 8, memory_per_gpu_mib: 97887"
    host = (
        f"  sglang-stacks:host: {{kind: ssh, address: 127.0.0.1, port: {port}, user: u,\n"
        "    connect_timeout_s: 2,\n"
        "    host_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl,\n"
        f"    {facts}, compute_capability: '12.0', interconnect: pcie}}\n"
    )
    workspace.init_stack("far", "config:\n" + host + MODEL + SERVER.replace("tp_size: 2", "tp_size: 16"))
    done = workspace.cli("check", "far")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "  FAIL  preflight: tp-exceeds-gpus" in done.stdout
    assert f"  FAIL  host: 127.0.0.1:{port} does not answer" in done.stdout
    assert "Check host.address and host.port" in done.stdout


def test_a_setup_without_a_backend_or_a_stack_file_says_so(workspace: Workspace) -> None:
    workspace.extra_env["PULUMI_BACKEND_URL"] = f"file://{workspace.path / 'nowhere'}"
    done = workspace.cli("check", "missing")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "  FAIL  backend: `pulumi stack ls --json` failed" in done.stdout
    assert "Run `. scripts/env.sh`: it creates the local backend's folder." in done.stdout
    assert "  FAIL  stack missing: There is no stack file Pulumi.missing.yaml in stacks/." in done.stdout


def test_a_secret_under_the_demo_passphrase_fails_the_check_as_the_program_would(
    workspace: Workspace,
) -> None:
    workspace.extra_env["PULUMI_CONFIG_PASSPHRASE"] = "sglang-stacks-demo"
    workspace.init_stack("keyed", "config:\n  sglang-stacks:host: {kind: emulator}\n" + MODEL + SERVER)
    workspace.run("config", "set", "--secret", "sglang-stacks:hubToken", "not-for-anyone", "-s", "keyed")
    done = workspace.cli("check", "keyed")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "  FAIL  secrets: Stack 'keyed' holds sglang-stacks:hubToken under the demo passphrase" in done.stdout
    )
    assert "not-for-anyone" not in done.stdout


def test_a_held_update_lock_is_named_with_what_to_do(workspace: Workspace) -> None:
    """`pulumi up` stops at a lock naming only `pulumi cancel`; check says whose it is and, for a
    killed update's, the command that also clears what that update left."""
    workspace.init_stack("held", "config:\n  sglang-stacks:host: {kind: emulator}\n" + MODEL + SERVER)
    ended = subprocess.Popen(["true"])
    ended.wait()
    for pid, hostname, said in (
        (ended.pid, None, f"left by a killed update (pid {ended.pid}"),
        (os.getpid(), None, f"held by an update running now (pid {os.getpid()})"),
        (os.getpid(), "another-machine", f"held by an update on another-machine (pid {os.getpid()})"),
    ):
        lock = workspace.leave_lock("held", pid, hostname)
        done = workspace.cli("check", "held")
        lock.unlink()
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"  FAIL  update lock: {said}" in done.stdout, done.stdout
        if hostname is None and pid == ended.pid:
            assert "Run `sglang-stacks recover held`: it lets go of the lock" in done.stdout, done.stdout
