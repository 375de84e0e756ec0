"""Updates killed or interrupted by the user: the host is let go, nothing of the tool runs on, and
the next `pulumi up` converges to exactly one healthy server with no manual step."""

from __future__ import annotations

import os
import signal
import time

import pytest

from sglang_stacks.hostops import backend_lock as locks
from tests.faults.drill import (
    LONG_BENCHMARK,
    Drill,
    ctrl_c,
    engine_addresses,
    finish,
    healthy,
    interrupt,
    loadgens,
    process_tree,
    processes,
    servers,
    wait_for,
)

pytestmark = pytest.mark.integration


def converges(drill: Drill, stack: str, port: int, *, cancel: bool = True) -> str:
    """The next `up` (after `pulumi cancel`, which Pulumi's own lock of a killed CLI needs, unless
    ``cancel`` is off: `recover` did it) succeeds and leaves exactly one healthy server and a claim
    no update holds."""
    if cancel:
        drill.workspace.run("cancel", "--yes", "-s", stack, check=False)
    result = drill.up(stack, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(servers(port)) == 1 and healthy(port)
    holder = drill.claim()
    assert holder is not None and (holder.stack, holder.updating) == (stack, False)
    assert holder.server_pid == servers(port)[0]
    assert drill.tool_processes() == []
    return result.stdout + result.stderr


def test_sigkill_of_pulumi_during_a_replacing_benchmark_leaves_no_process_of_the_update(
    drill: Drill,
) -> None:
    port = drill.add_stack("replaced", benchmark=LONG_BENCHMARK)
    drill.up("replaced")
    # The server died, so each update replaces it and its benchmark: the engine then starts a
    # provider process it may never call, which lived on forever after a killed CLI. Killed as the
    # benchmark starts, and a moment later.
    for moment_s in (0.0, 1.5):
        left = kill_during_a_replacing_benchmark(drill, "replaced", port, moment_s)
        assert not left, f"left 15 s after a kill {moment_s:g} s into the benchmark: {left}"
        holder = drill.claim()
        assert holder is not None and holder.updating is False
    converges(drill, "replaced", port)


def kill_during_a_replacing_benchmark(drill: Drill, stack: str, port: int, moment_s: float) -> list[str]:
    """Kills -9 the server of ``stack``, starts `pulumi up`, kills -9 the CLI ``moment_s`` after
    the benchmark starts, and returns what of the update still runs 15 s later: what its process
    tree held at the kill, and anything started with its engine's address."""
    for pid in servers(port):
        os.kill(pid, signal.SIGKILL)
    drill.workspace.run("cancel", "--yes", "-s", stack, check=False)
    update = drill.start("up", "--yes", "--skip-preview", "-s", stack)
    wait_for(lambda: loadgens(port) or update.poll() is not None, 120, "the benchmark to start")
    time.sleep(moment_s)
    assert update.poll() is None, update.communicate()[0]
    tree = [proc for proc in process_tree(update.pid) if "sglang_emulator" not in proc.args]
    addresses = engine_addresses(tree)
    assert addresses, tree

    interrupt(update, signal.SIGKILL)
    update.wait()

    def left() -> list[str]:
        by_tree = [f"{proc.pid}: {proc.args[:160]}" for proc in tree if proc.alive()]
        by_address = [f"{pid}: {address}" for address in addresses for pid in processes(address)]
        return by_tree + by_address

    deadline = time.monotonic() + 15
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    return left()


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


def recovered(drill: Drill, stack: str) -> str:
    """`sglang-stacks recover <stack>` right after a kill, alone (no `pulumi cancel`): it exits 0,
    having let go of the killed update's lock, and leaves nothing pending."""
    done = drill.workspace.cli("recover", stack, timeout_s=180)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    # The killed CLI's lock: let go by its update's provider on its way out, else by recover.
    assert not locks.read_locks(f"file://{drill.workspace.backend}", stack), said
    assert f"nothing remains; `pulumi up -s {stack}` converges" in said, said
    assert "pending_operations" not in drill.workspace.deployment(stack)
    return said


def test_sigkill_at_three_moments_is_recovered_by_one_command_each_time(drill: Drill) -> None:
    # The server takes 6 s to be ready and the benchmark several seconds: room for the kills.
    port = drill.add_stack("recovered", benchmark=LONG_BENCHMARK, faults="        slow_readiness_s: 6\n")

    # 1. During the environment step: nothing runs yet; its create was pending.
    update = drill.up_until_pending("recovered", "recovered-environment")
    interrupt(update, signal.SIGKILL)
    update.wait()
    said = recovered(drill, "recovered")
    assert "creating recovered-environment (sglang:PythonEnvironment): safe to run again" in said, said

    # 2. While the server starts: the server the create launched runs, known to no state: stopped.
    update = drill.up_until_pending("recovered", "recovered-server")
    wait_for(lambda: servers(port) or update.poll() is not None, 120, "the server to start")
    launched = servers(port)
    interrupt(update, signal.SIGKILL)
    update.wait()
    said = recovered(drill, "recovered")
    assert f"the server it had launched on the local host (pid {launched[0]}) runs, known to no state" in said
    assert f"recover: stopped the server it had launched on the local host (pid {launched[0]})." in said
    assert servers(port) == []

    # 3. During the benchmark: the host is let go, and the server the state tracks serves on.
    update = drill.up_until_pending("recovered", "recovered-benchmark")
    wait_for(lambda: loadgens(port) or update.poll() is not None, 120, "the benchmark to start")
    serving = servers(port)
    assert len(serving) == 1 and healthy(port)
    interrupt(update, signal.SIGKILL)
    update.wait()
    # Before any command: no process of the tool runs on (provider, its wrapper, language host,
    # program, load generator) and the host no longer counts the update as running, with nothing
    # killed by hand.
    wait_for(lambda: not drill.tool_processes(), 30, f"no orphans: {drill.tool_processes()}")
    wait_for(lambda: not loadgens(port), 15, "the load generator to stop")
    holder = drill.claim()
    assert holder is not None and (holder.stack, holder.updating) == ("recovered", False)
    said = recovered(drill, "recovered")
    assert "creating recovered-benchmark (sglang:Benchmark): safe to run again" in said, said
    assert servers(port) == serving and healthy(port), "recover stopped the server the state tracks"

    # Then `pulumi up` works, says nothing of pending operations, and leaves none.
    output = converges(drill, "recovered", port, cancel=False)
    assert "pending" not in output.lower(), output
    assert "pending_operations" not in drill.workspace.deployment("recovered")


@pytest.mark.parametrize(
    ("resource", "times"),
    [("environment", 1), ("server", 2), ("benchmark", 1)],
    ids=["environment-once", "server-start-twice", "benchmark-once"],
)
def test_ctrl_c_to_the_process_group_leaves_nothing_running_and_the_next_up_is_clean(
    drill: Drill, resource: str, times: int
) -> None:
    """A terminal's Ctrl-C reaches every process of the update, not only the CLI. Whatever it
    interrupts, no program of the tool runs on anywhere, the host is let go, and the next `pulumi
    up`, with no other command, ends with one healthy server and no pending operation."""
    stack = f"ctrl-c-{resource}-{times}"
    port = drill.add_stack(stack, benchmark=LONG_BENCHMARK, faults="        slow_readiness_s: 6\n")
    if resource == "benchmark":
        drill.up(stack)  # a serving server, replaced by the next update
        config = drill.workspace.path / "stacks" / f"Pulumi.{stack}.yaml"
        config.write_text(config.read_text().replace("output_len: 160", "output_len: 161"))
    update = drill.up_until_pending(stack, f"{stack}-{resource}", group=True)
    if resource == "server":
        wait_for(lambda: servers(port) or update.poll() is not None, 120, "the server to start")
    if resource == "benchmark":
        wait_for(lambda: loadgens(port) or update.poll() is not None, 120, "the benchmark to start")
    serving = servers(port)

    ctrl_c(update, times)
    update.wait(timeout=120)

    wait_for(lambda: not drill.tool_processes(), 30, f"no program of the tool: {drill.tool_processes()}")
    holder = drill.claim()
    assert holder is None or holder.updating is False
    if resource == "benchmark":
        assert servers(port) == serving and healthy(port), "Ctrl-C stopped the server the state tracks"
    result = drill.up(stack, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert len(servers(port)) == 1 and healthy(port)
    deployment = drill.workspace.deployment(stack)
    assert "pending_operations" not in deployment, (
        [(op["type"], op["resource"]["urn"].rsplit("::", 1)[1]) for op in deployment["pending_operations"]],
        output,
    )
    assert drill.tool_processes() == []
    drill.workspace.run("destroy", "--yes", "--skip-preview", "-s", stack)


def test_a_killed_cli_leaves_no_lock_and_the_next_up_needs_no_other_command(drill: Drill) -> None:
    """`kill -9` of `pulumi up` while the server starts: Pulumi's own lock would stop the next `up`
    ("currently locked ... `pulumi cancel`"). The update's provider outlives the CLI by a moment and
    lets go of the dead CLI's lock, so a plain `pulumi up` runs, stops the server the killed create
    launched, and serves."""
    port = drill.add_stack("killed-plain", faults="        slow_readiness_s: 6\n")
    update = drill.up_until_pending("killed-plain", "killed-plain-server")
    wait_for(lambda: servers(port) or update.poll() is not None, 120, "the server to start")
    interrupt(update, signal.SIGKILL)
    update.wait()

    wait_for(lambda: not drill.tool_processes(), 30, f"no program of the tool: {drill.tool_processes()}")
    assert not locks.read_locks(f"file://{drill.workspace.backend}", "killed-plain")
    result = drill.up("killed-plain", check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "currently locked" not in output, output
    assert len(servers(port)) == 1 and healthy(port)
    drill.workspace.run("destroy", "--yes", "--skip-preview", "-s", "killed-plain")
