"""`sglang-stacks recover` against the real Pulumi CLI: pending operations this tool knows are stale
are cleared, and anything else is left in place with the command that settles it.

The drill that kills `pulumi up` while the server starts, then recovers, is in
tests/faults/test_kills.py.
"""

from __future__ import annotations

import io

import pytest

from sglang_stacks import recover
from tests._pulumi import Workspace

pytestmark = pytest.mark.integration

BENCHMARK = "pulumi-python:dynamic/sglang:Benchmark"
ROUTER = "pulumi-python:dynamic/sglang:Router"
SERVER = "pulumi-python:dynamic/sglang:Server"


@pytest.fixture
def project(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    for name, value in workspace.env().items():
        monkeypatch.setenv(name, value)
    workspace.run("stack", "init", "tuned")
    return workspace


def pending(project: Workspace) -> list[str]:
    exported = project.json("stack", "export", "-s", "tuned")["deployment"]
    return [
        op["type"] + " " + op["resource"]["urn"].rsplit("::", 1)[1]
        for op in exported.get("pending_operations", [])
    ]


def test_a_stale_create_of_the_tools_own_resource_is_cleared(project: Workspace) -> None:
    project.leave_pending("tuned", ("creating", BENCHMARK, "tuned-benchmark"))
    out = io.StringIO()

    code = recover.recover("tuned", project_dir=project.path, out=out)

    assert code == recover.EXIT_CLEAN, out.getvalue()
    assert "creating tuned-benchmark (sglang:Benchmark): safe to run again" in out.getvalue()
    assert "cleared 1; nothing remains. `pulumi up -s tuned` converges." in out.getvalue()
    assert pending(project) == []


def test_what_the_tool_cannot_settle_is_left_in_place_with_its_command(project: Workspace) -> None:
    project.leave_pending(
        "tuned",
        ("creating", BENCHMARK, "tuned-benchmark"),
        ("deleting", BENCHMARK, "tuned-old-benchmark"),
        ("creating", ROUTER, "tuned-router"),
        ("creating", SERVER, "tuned-server"),  # recorded without the inputs that name its host
    )
    out = io.StringIO()

    code = recover.recover("tuned", project_dir=project.path, out=out)

    said = out.getvalue()
    assert code == recover.EXIT_LEFT_FOR_YOU, said
    assert "deleting tuned-old-benchmark (sglang:Benchmark): left for you: `pulumi refresh -s tuned`" in said
    assert "creating tuned-router (sglang:Router): left for you: check whether it created anything" in said
    assert "creating tuned-server (sglang:Server): left for you: its host could not be checked" in said
    assert "`pulumi refresh --clear-pending-creates -s tuned` clears every pending operation" in said
    # Clearing only some is impossible (an import drops them all): nothing was cleared.
    assert pending(project) == [
        "creating tuned-benchmark",
        "deleting tuned-old-benchmark",
        "creating tuned-router",
        "creating tuned-server",
    ]


def test_a_stack_without_pending_operations_needs_nothing(project: Workspace) -> None:
    out = io.StringIO()
    assert recover.recover("tuned", project_dir=project.path, out=out) == recover.EXIT_CLEAN
    assert out.getvalue() == "recover: stack tuned has no pending operations; nothing to do.\n"
