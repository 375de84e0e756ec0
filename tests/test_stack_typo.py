"""A mistake in a deployed stack's file is refused before its hosts are read: scripts/env.sh runs
the program ahead of the refresh Pulumi.yaml asks for (``PULUMI_RUN_PROGRAM``). The update that
follows the fix converges as before, and a stack whose file broke after its last update can still
be destroyed, as the refusal says."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._pulumi import Workspace, emulator_stack, free_port
from tests.test_deployment import emulator_pids

pytestmark = pytest.mark.integration

STACK = "typo"
RIGHT = "    trust_remote_code: true\n"
TYPO = "    trust_remote_cod: true\n"


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, Path, int]]:
    """The stack deployed to the emulator, with the setting scripts/env.sh exports; one deployment
    for the file (the typo's test first, then the destroy's)."""
    tmp = tmp_path_factory.mktemp("typo")
    workspace = Workspace.create(tmp)
    workspace.extra_env["PULUMI_RUN_PROGRAM"] = "true"
    port = free_port()
    workspace.init_stack(STACK, emulator_stack(port=port, state_dir=tmp / "state"))
    workspace.run("up", "--yes", "--skip-preview", "-s", STACK)
    yield workspace, workspace.path / "stacks" / f"Pulumi.{STACK}.yaml", port
    for pid in emulator_pids(port):
        os.kill(pid, signal.SIGKILL)


def test_a_typo_is_refused_before_the_refresh_and_the_fixed_file_deploys(
    deployed: tuple[Workspace, Path, int],
) -> None:
    workspace, stack_file, port = deployed
    stack_file.write_text(stack_file.read_text().replace(RIGHT, TYPO))

    for command in (["preview"], ["up", "--yes"]):
        result = workspace.run(*command, "-s", STACK, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert "sglang-stacks:server.trust_remote_cod: unknown key" in output, output
        assert "did you mean trust_remote_code?" in output, output
        assert "refresh" not in output.split("Diagnostics:")[0], output  # no host was read
    serving = emulator_pids(port)
    assert serving, "the refused update left the deployed server serving"

    stack_file.write_text(
        stack_file.read_text().replace(TYPO, RIGHT).replace("cuda_graph_max_bs: 128", "cuda_graph_max_bs: 96")
    )
    workspace.run("up", "--yes", "-s", STACK)

    assert workspace.outputs(STACK)["launch_flags"]["cuda_graph_max_bs"] == 96
    assert emulator_pids(port) and emulator_pids(port) != serving, "the change relaunched the server"
    again = workspace.run("preview", "--expect-no-changes", "-s", STACK, check=False)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_stack_whose_file_broke_is_destroyed_as_the_refusal_says(
    deployed: tuple[Workspace, Path, int],
) -> None:
    workspace, stack_file, port = deployed
    stack_file.write_text(stack_file.read_text().replace(RIGHT, TYPO))

    refused = workspace.run("destroy", "--yes", "-s", STACK, check=False)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    said = f"pulumi destroy -s {STACK} --run-program=false"
    assert said in output, output
    assert emulator_pids(port), "the refused destroy stopped nothing"

    workspace.run(*said.split()[1:], "--yes")

    assert emulator_pids(port) == []
    assert workspace.deployment(STACK).get("resources") in (None, [])
