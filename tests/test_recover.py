"""`sglang-stacks recover` against the real Pulumi CLI: pending operations this tool knows are stale
are cleared, and anything else is left in place with the command that settles it.

The drill that kills `pulumi up` while the server starts, then recovers, is in
tests/faults/test_kills.py.
"""

from __future__ import annotations

import functools
import io
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from sglang_stacks.components.router import RouterInputs, leftover_router, start_router, stop_router
from sglang_stacks.drive import automation, recover
from sglang_stacks.errors import StacksError
from sglang_stacks.exits import ExitCode
from tests._pulumi import Workspace, emulator_stack, free_port
from tests._router import local_router_props

pytestmark = pytest.mark.integration

BENCHMARK = "pulumi-python:dynamic/sglang:Benchmark"
DRAFT = "pulumi-python:dynamic/sglang:DraftModel"
COMMAND = "command:remote:Command"
ROUTER = "pulumi-python:dynamic/sglang:Router"
WORKER = "pulumi-python:dynamic/sglang:RouterWorker"
SERVER = "pulumi-python:dynamic/sglang:Server"


@pytest.fixture
def project(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    workspace.enter(monkeypatch)
    workspace.run("stack", "init", "tuned")
    return workspace


def pending(project: Workspace) -> list[str]:
    exported = project.deployment("tuned")
    return [
        op["type"] + " " + op["resource"]["urn"].rsplit("::", 1)[1]
        for op in exported.get("pending_operations", [])
    ]


def test_a_stale_create_of_the_tools_own_resource_is_cleared(project: Workspace) -> None:
    project.leave_pending(
        "tuned",
        ("creating", BENCHMARK, "tuned-benchmark"),
        # The router keeps one registration of a worker added twice (tests/test_router.py).
        ("creating", WORKER, "tuned-r0-worker"),
    )
    out = io.StringIO()

    code = recover.recover("tuned", project_dir=project.path, out=out)

    assert code == ExitCode.OK, out.getvalue()
    assert "creating tuned-benchmark (sglang:Benchmark): safe to run again" in out.getvalue()
    assert "creating tuned-r0-worker (sglang:RouterWorker): safe to run again" in out.getvalue()
    assert "cleared 2 pending operation(s)" in out.getvalue()
    assert "nothing remains; `pulumi up -s tuned` converges." in out.getvalue()
    assert pending(project) == []


def test_an_interrupted_update_or_delete_of_the_tools_own_resource_is_cleared(project: Workspace) -> None:
    # What an update killed while it updated or deleted leaves: the state still holds the resource
    # as it was, and each of this tool's updates and deletes runs again safely.
    project.leave_pending(
        "tuned",
        ("updating", DRAFT, "tuned-draft-model"),
        ("deleting", BENCHMARK, "tuned-old-benchmark"),
    )
    out = io.StringIO()

    code = recover.recover("tuned", project_dir=project.path, out=out)

    said = out.getvalue()
    assert code == ExitCode.OK, said
    assert (
        "updating tuned-draft-model (sglang:DraftModel): the state keeps it as it was, and the next "
        "`pulumi up` updates it again" in said
    )
    assert "deleting tuned-old-benchmark (sglang:Benchmark): the state keeps it, and the next" in said
    assert pending(project) == []


def test_what_the_tool_cannot_settle_is_left_in_place_with_its_command(project: Workspace) -> None:
    project.leave_pending(
        "tuned",
        ("creating", BENCHMARK, "tuned-benchmark"),
        ("updating", COMMAND, "tuned-old-command"),  # another provider's: this tool cannot tell
        ("creating", ROUTER, "tuned-router"),
        ("creating", SERVER, "tuned-server"),  # recorded without the inputs that name its host
    )
    out = io.StringIO()

    code = recover.recover("tuned", project_dir=project.path, out=out)

    said = out.getvalue()
    assert code == ExitCode.LEFT_FOR_YOU, said
    assert "updating tuned-old-command (command:remote:Command): left for you: `pulumi refresh -s" in said
    assert "creating tuned-router (sglang:Router): left for you: its host could not be checked" in said
    assert "creating tuned-server (sglang:Server): left for you: its host could not be checked" in said
    assert "`pulumi refresh --clear-pending-creates -s tuned` clears every pending operation" in said
    # Clearing only some is impossible (an import drops them all): nothing was cleared.
    assert pending(project) == [
        "creating tuned-benchmark",
        "updating tuned-old-command",
        "creating tuned-router",
        "creating tuned-server",
    ]


def test_the_lock_of_a_killed_update_is_let_go_first_and_a_live_ones_never(
    project: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.leave_pending("tuned", ("creating", BENCHMARK, "tuned-benchmark"))
    # An update of another machine holds it: it may run, so nothing is touched.
    live = project.leave_lock("tuned", os.getpid(), hostname="another-machine")

    with pytest.raises(StacksError, match=r"an update that may still run \(pid \d+ on another-machine\)"):
        recover.recover("tuned", project_dir=project.path, out=io.StringIO())

    assert live.exists() and pending(project) == ["creating tuned-benchmark"]
    live.unlink()
    # Nor is one of this machine whose update still runs (this process took it), after the time a
    # killed holder has to end (shortened here).
    live = project.leave_lock("tuned", os.getpid())
    waiting_1_s = functools.partial(automation.cancel_dead_lock, wait_s=1)
    with (
        monkeypatch.context() as patched,
        pytest.raises(StacksError, match=rf"an update that may still run \(pid {os.getpid()} on this"),
    ):
        patched.setattr(recover, "cancel_dead_lock", waiting_1_s)
        recover.recover("tuned", project_dir=project.path, out=io.StringIO())
    assert live.exists() and pending(project) == ["creating tuned-benchmark"]
    live.unlink()
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = project.leave_lock("tuned", ended.pid)  # a `pulumi up` of this machine that was killed
    out = io.StringIO()

    code = recover.recover("tuned", project_dir=project.path, out=out)

    assert code == ExitCode.OK, out.getvalue()
    assert out.getvalue().startswith(
        f"recover: cancelled the lock of a killed update (pid {ended.pid}, no longer running).\n"
    )
    assert not dead.exists() and pending(project) == []
    assert automation.cancel_dead_lock(automation.select_stack(project.path, "tuned")) is None  # no lock


def test_an_update_the_tool_runs_into_a_killed_updates_lock_names_recover(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Pulumi's refusal names `pulumi cancel`, which leaves the killed update's pending operations
    and servers; the tool's own commands that run an update name `recover` after it."""
    workspace.init_stack("locked", emulator_stack(port=free_port(), state_dir=tmp_path))
    ended = subprocess.Popen(["true"])
    ended.wait()
    workspace.leave_lock("locked", ended.pid)

    done = workspace.cli("rollout", "locked")

    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "the stack is currently locked" in said, said
    assert "`sglang-stacks recover locked` lets go of its lock and clears what it left" in said, said


def test_a_preview_warns_of_the_pending_operations_pulumi_keeps(workspace: Workspace, tmp_path: Path) -> None:
    workspace.init_stack("kept", emulator_stack(port=free_port(), state_dir=tmp_path))
    # Two killed updates' creates, which `pulumi up` and `preview` keep without a word of their own.
    workspace.leave_pending(
        "kept", ("creating", SERVER, "kept-server"), ("creating", BENCHMARK, "kept-benchmark")
    )

    preview = workspace.run("preview", "-s", "kept")

    said = " ".join((preview.stdout + preview.stderr).split())
    assert (
        "stack kept has 2 pending operation(s) that interrupted updates left (creating kept-server "
        "(sglang:Server); creating kept-benchmark (sglang:Benchmark)); Pulumi keeps them, one more for "
        "each killed update. `sglang-stacks recover kept` clears them"
    ) in said, said


def test_a_stack_without_pending_operations_needs_nothing(project: Workspace) -> None:
    out = io.StringIO()
    assert recover.recover("tuned", project_dir=project.path, out=out) == ExitCode.OK
    assert out.getvalue() == "recover: stack tuned has no pending operations; nothing to do.\n"


def test_a_router_an_interrupted_create_left_running_is_stopped_and_the_create_cleared(
    project: Workspace, tmp_path: Path
) -> None:
    inputs = local_router_props(str(tmp_path / "router" / "tuned-router.log"))
    typed = RouterInputs.model_validate(inputs)
    # What a `pulumi up` killed during the router's create leaves: the router runs, no state has it.
    started = start_router(typed)
    try:
        project.leave_pending("tuned", ("creating", ROUTER, "tuned-router", inputs))
        out = io.StringIO()

        code = recover.recover("tuned", project_dir=project.path, out=out)

        said = out.getvalue()
        assert code == ExitCode.OK, said
        assert (
            f"creating tuned-router (sglang:Router): the router it had started on 127.0.0.1:{typed.port} "
            f"(the local host) (pid {started.pid}) runs, known to no state; safe to run again" in said
        )
        where = f"127.0.0.1:{typed.port} (the local host) (pid {started.pid})"
        assert f"recover: stopped the router it had started on {where}." in said
        assert pending(project) == []
        # Its port is free again, so the next `pulumi up` can start the fleet's router there.
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{started.url}/liveness", timeout=5)
        assert leftover_router(typed) is None

        # A create killed before it started anything leaves nothing: stale, cleared, nothing stopped.
        project.leave_pending("tuned", ("creating", ROUTER, "tuned-router", inputs))
        out = io.StringIO()
        assert recover.recover("tuned", project_dir=project.path, out=out) == ExitCode.OK
        assert f"127.0.0.1:{typed.port} (the local host) runs no router that the state does not know" in (
            out.getvalue()
        )
        assert pending(project) == []
    finally:
        stop_router(typed, started.pid, started.start_ticks)
