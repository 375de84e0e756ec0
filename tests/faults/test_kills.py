"""Updates killed or interrupted by the user: the host is let go, nothing of the tool runs on, and
the next `pulumi up` converges to exactly one healthy server with no manual step."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.faults.drill import (
    LONG_BENCHMARK,
    Drill,
    finish,
    healthy,
    interrupt,
    loadgens,
    servers,
    wait_for,
)

pytestmark = pytest.mark.integration


def converges(drill: Drill, stack: str, port: int) -> str:
    """The next `up` (after `pulumi cancel`, which Pulumi's own lock of a killed CLI needs)
    succeeds and leaves exactly one healthy server and a claim no update holds."""
    drill.workspace.run("cancel", "--yes", "-s", stack, check=False)
    result = drill.up(stack, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(servers(port)) == 1 and healthy(port)
    holder = drill.claim()
    assert holder is not None and (holder.stack, holder.updating) == (stack, False)
    assert holder.server_pid == servers(port)[0]
    assert drill.tool_processes() == []
    return result.stdout + result.stderr


def test_sigkill_of_pulumi_during_the_benchmark_lets_go_of_the_host(drill: Drill) -> None:
    port = drill.add_stack("killed", benchmark=LONG_BENCHMARK)
    update = drill.start("up", "--yes", "--skip-preview", "-s", "killed")
    wait_for(lambda: loadgens(port) or update.poll() is not None, 120, "the benchmark to start")
    assert update.poll() is None, update.communicate()[0]

    interrupt(update, signal.SIGKILL)
    update.wait()

    # No process of the tool runs on (provider, its wrapper, language host, program, loadgen),
    # and the host no longer counts the update as running, all without anything killed by hand.
    wait_for(lambda: not drill.tool_processes(), 30, f"no orphans: {drill.tool_processes()}")
    wait_for(lambda: not loadgens(port), 15, "the load generator to stop")
    holder = drill.claim()
    assert holder is not None and (holder.stack, holder.updating) == ("killed", False)
    converges(drill, "killed", port)


def test_sigint_twice_during_the_servers_start(drill: Drill) -> None:
    # The server takes a few seconds to say it is ready: the interruptions land during its start.
    port = drill.add_stack("interrupted", faults="        slow_readiness_s: 6\n")
    update = drill.start("up", "--yes", "--skip-preview", "-s", "interrupted")
    wait_for(lambda: servers(port) or update.poll() is not None, 120, "the server to start")
    assert update.poll() is None, update.communicate()[0]

    interrupt(update, signal.SIGINT)
    interrupt(update, signal.SIGINT)
    output = finish(update)

    assert update.returncode != 0, output
    wait_for(lambda: not drill.tool_processes(), 30, f"no orphans: {drill.tool_processes()}")
    holder = drill.claim()
    assert holder is not None and holder.updating is False
    converges(drill, "interrupted", port)


def test_sigkill_during_the_servers_start_leaves_a_pending_create_that_recover_clears(drill: Drill) -> None:
    # Killed while the server starts: Pulumi keeps the server's create as pending, and the server
    # the create launched runs on, recorded in the claim but in no state.
    port = drill.add_stack("pending", faults="        slow_readiness_s: 6\n")
    update = drill.start("up", "--yes", "--skip-preview", "-s", "pending")
    wait_for(lambda: servers(port) or update.poll() is not None, 120, "the server to start")
    assert update.poll() is None, update.communicate()[0]
    interrupt(update, signal.SIGKILL)
    update.wait()
    wait_for(lambda: not drill.tool_processes(), 30, f"no orphans: {drill.tool_processes()}")
    drill.workspace.run("cancel", "--yes", "-s", "pending")
    left = drill.workspace.json("stack", "export", "-s", "pending")["deployment"]["pending_operations"]
    assert [(op["type"], op["resource"]["type"]) for op in left] == [
        ("creating", "pulumi-python:dynamic/sglang:Server")
    ]

    recovered = subprocess.run(
        [sys.executable, "-m", "sglang_stacks.cli", "recover", "pending"],
        cwd=drill.workspace.path,
        env=drill.workspace.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    said = recovered.stdout + recovered.stderr
    assert recovered.returncode == 0, said
    assert "creating pending-server (sglang:Server)" in said and "stopped it" in said, said
    assert "nothing remains. `pulumi up -s pending` converges" in said, said
    assert servers(port) == [], "the server the killed update launched still runs"
    assert "pending_operations" not in drill.workspace.json("stack", "export", "-s", "pending")["deployment"]
    assert "pending operations" not in converges(drill, "pending", port)
