"""Stacks sharing one host: a failing update of one never costs the other its server unless it
has to, and says so when it did (two updates racing for the host: tests/test_deployment.py)."""

from __future__ import annotations

import shutil

import pytest

from sglang_stacks.errors import failure_from_output
from tests._pulumi import ROOT
from tests.faults.drill import Drill, healthy, servers

pytestmark = pytest.mark.integration

EAGLE3 = (
    "  sglang-stacks:draftModel:\n"
    "    source: local\n"
    "    local_path: {local}\n"
    "    path_on_host: {state}/draft/eagle3\n"
    '    sha256: "{sha256}"\n'
    "    weights_gb: 2.4\n"
)
EAGLE3_SERVER = (
    "    cuda_graph_max_bs: 128\n"
    "    mem_fraction_static: 0.88\n"
    "    speculative_algorithm: EAGLE\n"
    "    speculative_num_steps: 2\n"
    "    speculative_eagle_topk: 4\n"
    "    speculative_num_draft_tokens: 4\n"
)


@pytest.fixture(scope="module")
def serving(drill: Drill) -> int:
    """Stack ``serving`` deployed: the host serves it."""
    port = drill.add_stack("serving")
    drill.up("serving")
    return port


def assert_serves(drill: Drill, stack: str, port: int) -> None:
    """The host serves ``stack`` with exactly one healthy server, recorded in a settled claim."""
    assert len(servers(port)) == 1 and healthy(port)
    holder = drill.claim()
    assert holder is not None and (holder.stack, holder.updating) == (stack, False)
    assert holder.server_pid == servers(port)[0]
    assert drill.tool_processes() == []


def test_a_wrong_draft_model_fails_before_the_other_stacks_server_is_stopped(
    drill: Drill, serving: int
) -> None:
    # A draft model as big as a small real one: checking it takes long enough that a takeover
    # running beside the check (as it did) stops the other stack's server before it fails.
    local = drill.state / "big-draft"
    shutil.copytree(ROOT / "artifacts" / "eagle3-standin", local)
    with (local / "model.safetensors").open("wb") as weights:
        weights.truncate(768 * 2**20)
    draft = EAGLE3.format(state=drill.state, local=local, sha256="0" * 64)
    drill.add_stack("wrong-draft", draft=draft, server=EAGLE3_SERVER)

    failed = drill.up("wrong-draft", check=False)

    assert failed.returncode != 0
    assert "ArtifactError" in failed.stdout + failed.stderr, failed.stdout
    assert "nothing was uploaded" in failed.stdout, failed.stdout
    # No copy of the rejected 768 MB folder stays on the host, under any name.
    assert not (drill.state / "draft").exists() or list((drill.state / "draft").iterdir()) == []
    assert_serves(drill, "serving", serving)


def test_a_launch_that_fails_after_the_takeover_names_the_command_that_restores_the_host(
    drill: Drill, serving: int
) -> None:
    port = drill.add_stack("port-taken", faults="        port_in_use: true\n")

    failed = drill.up("port-taken", check=False)
    output = failed.stdout + failed.stderr

    assert failed.returncode != 0 and servers(port) == [] and servers(serving) == []
    assert "exited before it became ready (port_in_use)" in output, output
    recorded = failure_from_output(output)
    assert recorded is not None and recorded.cause == "port_in_use", output
    assert "no longer serves stack 'serving'" in output, output
    assert "`pulumi up -s serving` restores it" in output, output

    # Another failed start takes the host from a stack that never served: nothing to restore.
    drill.add_stack("port-taken-too", faults="        port_in_use: true\n")
    again = drill.up("port-taken-too", check=False)
    said = again.stdout + again.stderr
    assert again.returncode != 0 and "exited before it became ready (port_in_use)" in said, said
    assert "no longer serves" not in said and "restores it" not in said, said
    drill.up("serving")
    assert_serves(drill, "serving", serving)
