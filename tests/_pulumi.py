"""Drives the real Pulumi CLI on a throwaway local backend, in a workspace that mirrors the project.

The workspace links the project's program, components and virtualenv, and has a stacks/ folder of
its own, so tests never touch the repository's stack files or the user's state.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.runtime import rpc

from sglang_stacks.drive._workspace import go_runtime
from sglang_stacks.errors import RECORDS_ENV
from tests._ports import free_port as free_port  # where the tests find it

ROOT = Path(__file__).resolve().parent.parent
LINKED = (
    "Pulumi.yaml",
    "__main__.py",
    "components",
    "sglang_stacks",
    "sglang_flags",
    "sglang_world",
    "sglang_emulator",
    "toolchain",
    "artifacts",
    ".venv",
)
PASSPHRASE = "test-passphrase"


def pulumi_binary() -> str:
    """The `pulumi` on PATH; a clear failure, never a skip, when the toolchain is missing."""
    found = shutil.which("pulumi")
    if found is None:
        raise AssertionError(
            "The Pulumi CLI is not on PATH. Run the tests with scripts/test.sh, which bootstraps the "
            "toolchain and puts it on PATH."
        )
    return found


@dataclass
class Workspace:
    """A project folder plus a local backend, both temporary."""

    path: Path
    backend: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    """Variables every command of this workspace also gets (e.g. the results history's path)."""

    @classmethod
    def create(cls, tmp: Path) -> Workspace:
        path, backend = tmp / "project", tmp / "state"
        (path / "stacks").mkdir(parents=True)
        backend.mkdir()
        for name in LINKED:
            if (ROOT / name).exists():
                (path / name).symlink_to(ROOT / name)
        return cls(path, backend)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of the workspace's commands; ``extra`` adds or overrides variables."""
        env = dict(os.environ)
        # Each `pulumi` collects garbage as the tool's own do (a third less CPU for a short one).
        env.update(go_runtime())
        env.update(
            PULUMI_BACKEND_URL=f"file://{self.backend}",
            PULUMI_CONFIG_PASSPHRASE=PASSPHRASE,
            PULUMI_SKIP_UPDATE_CHECK="true",
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
            # The program once an operation, not also before its refresh as scripts/env.sh has it:
            # a second program run costs each update about two CPU-seconds. The tests of that
            # setting turn it on (tests/test_stack_typo.py).
            PULUMI_RUN_PROGRAM="false",
            SGLANG_STACKS_HOME=str(ROOT),
            # The tests read a failed update's typed record as the tool's drivers do; the tests of
            # what a bare `pulumi up` shows an operator turn it off.
            **{RECORDS_ENV: "1"},
        )
        env.update(self.extra_env)
        env.update(extra or {})
        return env

    def enter(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Give this process the workspace's environment, for code under test that drives Pulumi
        in-process (the Automation API), as a command of the workspace gets it."""
        for name, value in self.env().items():
            monkeypatch.setenv(name, value)

    def run(
        self, *args: str, check: bool = True, timeout_s: float = 600, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs `pulumi <args>` in the workspace, with `stdin` as its input (a secret's value, say);
        on failure the assertion shows its output."""
        argv = [pulumi_binary(), *args, "--non-interactive"]
        return self._command(argv, f"pulumi {' '.join(args)}", check, timeout_s, stdin)

    def cli(
        self, *args: str, check: bool = False, timeout_s: float = 900
    ) -> subprocess.CompletedProcess[str]:
        """Runs `sglang-stacks <args>` (``python -m sglang_stacks.cli``) in the workspace folder, as a
        user runs it there; with ``check``, a non-zero exit fails showing its output."""
        return self._command(self.cli_command(*args), f"sglang-stacks {' '.join(args)}", check, timeout_s)

    def _command(
        self, argv: list[str], said: str, check: bool, timeout_s: float, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            argv,
            cwd=self.path,
            env=self.env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{said} exited {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
            )
        return result

    def cli_command(self, *args: str) -> list[str]:
        """The command line of `sglang-stacks <args>`, for a test that starts it as a process of its own."""
        return [sys.executable, "-m", "sglang_stacks.cli", *args]

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args).stdout)

    def use_program(self, program: str) -> None:
        """Puts a test's own program in the workspace, in place of the project's."""
        main = self.path / "__main__.py"
        main.unlink()
        main.write_text(program)

    def init_stack(self, stack: str, config_yaml: str = "") -> None:
        """Creates `stack` with `config_yaml` (the `config:` section of a stack file) as its config."""
        self.run("stack", "init", stack)
        stack_file = self.path / "stacks" / f"Pulumi.{stack}.yaml"
        stack_file.write_text(stack_file.read_text() + config_yaml)

    def leave_pending(self, stack: str, *operations: tuple[Any, ...]) -> None:
        """Puts in ``stack``'s state the pending operations a killed update leaves, each
        ``(operation, resource type, resource name)``, e.g. ``("creating",
        "pulumi-python:dynamic/sglang:Server", "baseline-server")``, or with the resource's inputs
        as a fourth item. Written into the backend's file, since `pulumi stack import` drops
        pending operations."""
        path = self.state_file(stack)
        document = json.loads(path.read_text())
        document["checkpoint"].setdefault("latest", {})["pending_operations"] = [
            {
                "resource": {
                    "urn": f"urn:pulumi:{stack}::sglang-stacks::{kind}::{name}",
                    "custom": True,
                    "type": kind,
                    **({"inputs": inputs[0]} if inputs else {}),
                },
                "type": operation,
            }
            for operation, kind, name, *inputs in operations
        ]
        path.write_text(json.dumps(document))

    def leave_lock(self, stack: str, pid: int, hostname: str | None = None) -> Path:
        """A lock file of ``stack`` as `pulumi up` writes it on a local backend, taken by process
        ``pid`` of ``hostname`` (this machine by default)."""
        folder = self.backend / ".pulumi" / "locks" / "organization" / "sglang-stacks" / stack
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "0d3c1b5e-7a2f-4c1e-9c7b-2f6a8e4d1b00.json"
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        machine = hostname or socket.gethostname()
        path.write_text(json.dumps({"pid": pid, "username": "u", "hostname": machine, "timestamp": stamp}))
        return path

    def state_file(self, stack: str) -> Path:
        """The local backend's file of ``stack``: its config's salt and its last checkpoint."""
        return self.backend / ".pulumi" / "stacks" / "sglang-stacks" / f"{stack}.json"

    def deployment(self, stack: str) -> dict[str, Any]:
        """``stack``'s state as `pulumi stack export` prints its ``deployment`` (secrets
        encrypted), read from the backend's file: the CLI costs a quarter of a CPU-second a read,
        and the tests read states often. Pulumi writes the file whole, through a rename."""
        checkpoint = json.loads(self.state_file(stack).read_text())["checkpoint"]
        latest: dict[str, Any] = checkpoint.get("latest") or {}
        return latest

    def outputs(self, stack: str) -> dict[str, Any]:
        """``stack``'s outputs as `pulumi stack output --json` prints them, a secret as
        ``"[secret]"``, read from the stack resource in the backend's file."""
        resources = self.deployment(stack).get("resources") or []
        root: dict[str, Any] = next((r for r in resources if r["type"] == "pulumi:pulumi:Stack"), {})
        return {name: _secrets_hidden(value) for name, value in (root.get("outputs") or {}).items()}

    def server_pids(self, stack: str) -> dict[int, int]:
        """Each fleet host's server process as the stack's state records it, by host index."""
        pids = {}
        for resource in self.deployment(stack)["resources"]:
            name = resource["urn"].rsplit("::", 1)[1]
            if name.endswith("-server"):
                pids[int(name.split("-host")[1].split("-")[0])] = resource["outputs"]["pid"]
        return pids


def _secrets_hidden(value: Any) -> Any:
    """``value`` with each secret as `pulumi stack output` shows it (the SDK's signature marks one)."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return "[secret]"
        return {key: _secrets_hidden(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_secrets_hidden(item) for item in value]
    return value


def shipped_stack_config(stack: str, folder: Path) -> str:
    """The ``config:`` of the shipped fleet stack ``stack`` (a demo of stacks/), with only what ties
    it to one machine moved to this test's own: free ports for the servers, the router, the
    rendezvous and the prefill workers' bootstrap servers, and state folders under ``folder``."""
    document = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    config: dict[str, Any] = document["config"]
    fleet = config["sglang-stacks:fleet"]
    for index, host in enumerate(fleet["hosts"]):
        host.update(server_port=free_port(), state_dir=f"{folder}/host{index}")
        if "bootstrap_port" in host:
            host["bootstrap_port"] = free_port()
    fleet["router"].update(port=free_port(), metrics_port=free_port(), state_dir=f"{folder}/router")
    if "dist_init_port" in fleet:
        fleet["dist_init_port"] = free_port()
    text: str = yaml.safe_dump({"config": config}, sort_keys=False)
    return text


def emulator_stack(
    *,
    port: int,
    state_dir: Path,
    host: str = "  sglang-stacks:host:\n    kind: emulator\n",
    server: str = "    cuda_graph_max_bs: 128\n",
    draft: str = "",
    benchmark: str = "",
    extra: str = "",
) -> str:
    """A stack file's `config:` for a quick deployment to the emulator: the campaign's host and
    model, a startup thousands of times faster than a real one, and a small benchmark (``benchmark``
    adds keys to its section)."""
    return (
        "config:\n"
        f"{host}"
        f"    state_dir: {state_dir}/host\n"
        "  sglang-stacks:environment:\n"
        '    sglang_release: "0.5.8"\n'
        "    emulator:\n"
        "      time_scale: 0.002\n"
        f"      state_dir: {state_dir}/gpus\n"
        "  sglang-stacks:model:\n"
        "    path: /shared/kimi-k2.5-int4\n"
        "    weights_per_gpu_gb: 72.33\n"
        f"{draft}"
        "  sglang-stacks:server:\n"
        "    tp_size: 8\n"
        "    trust_remote_code: true\n"
        "    disable_custom_all_reduce: true\n"
        f"    port: {port}\n"
        f"{server}"
        "  sglang-stacks:benchmark:\n"
        "    input_len: 32\n"
        "    output_len: 48\n"
        "    warmup_requests: 1\n"
        "    repetitions: 3\n"
        "    requests_per_repetition: 1\n"
        f"{benchmark}"
        "  sglang-stacks:launch:\n"
        "    ready_timeout_s: 120\n"
        "    stop_timeout_s: 30\n"
        f"{extra}"
    )


@contextmanager
def deployed_shipped_stack(folder: Path, stack: str) -> Iterator[Workspace]:
    """The shipped stack ``stack`` (`shipped_stack_config`) deployed in a workspace of its own in
    ``folder`` for the block, destroyed after it (a test that destroyed it already leaves nothing)."""
    workspace = Workspace.create(folder)
    workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(folder / "history.sqlite")
    workspace.init_stack(stack, shipped_stack_config(stack, folder))
    try:
        workspace.run("up", "--yes", "--skip-preview", "-s", stack, timeout_s=900)
        yield workspace
    finally:
        workspace.run("destroy", "--yes", "--skip-preview", "-s", stack, check=False, timeout_s=600)
