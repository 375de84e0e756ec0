"""A finished trial's stack leaves the backend and its file leaves ``stacks/`` even when Ctrl-C cuts
its ``pulumi stack rm`` short: the terminal sends it to the whole job, the CLI among them, which may
have removed the stack before it died (exit -2) or not yet. Real Pulumi CLI and local backend; the
cut is stood in for by a removal that raises as the killed CLI does, after or instead of the real
one."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pulumi import automation as auto

from sglang_stacks.campaign.trial import REMOVAL_REFUSED, TrialRunner
from sglang_stacks.drive import automation
from sglang_stacks.errors import SpecError
from tests._pulumi import Workspace

pytestmark = pytest.mark.integration

CUT_SHORT = auto.CommandError(auto.CommandResult(stdout="", stderr="", code=-2))


@pytest.fixture
def project(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    workspace.enter(monkeypatch)
    return workspace


def _removed_by(project: Workspace, cuts: list[bool]) -> tuple[set[str], set[str], str]:
    """A trial stack removed by a runner whose ``stack rm`` calls are cut short as ``cuts`` says
    (True: the CLI removed the stack from the backend, then died before its file; False: it died
    first): the stacks the backend lists, the stack files left, the trial's log."""
    project.init_stack("trial-1")
    selected = automation.select_stack(project.path, "trial-1")
    real: Callable[..., None] = selected.workspace.remove_stack
    calls = iter(cuts)

    def remove_stack(name: str, *args: object, **kwargs: object) -> None:
        removed_first = next(calls, None)
        if removed_first is None:
            real(name)
            return
        if removed_first:
            real(name, preserve_config=True)
        raise CUT_SHORT

    selected.workspace.remove_stack = remove_stack  # type: ignore[method-assign,assignment]
    runner = TrialRunner(project.path, project.path / "logs", "trial", "base")
    runner._remove(selected)
    listed = {stack["name"] for stack in project.json("stack", "ls", "--json")}
    files = {path.name for path in (project.path / "stacks").glob("Pulumi.*.yaml")}
    log = runner.log_path("trial-1")
    return listed, files, log.read_text() if log.exists() else ""


def test_a_removal_cut_short_after_the_stack_left_the_backend_takes_its_file_too(project: Workspace) -> None:
    listed, files, _ = _removed_by(project, [True])
    assert listed == set() and files == set(), (listed, files)


def test_a_removal_cut_short_before_it_removed_anything_is_made_again(project: Workspace) -> None:
    listed, files, _ = _removed_by(project, [False])
    assert listed == set() and files == set(), (listed, files)


def test_a_stack_that_cannot_be_removed_stays_with_its_file_and_the_log_says_so(project: Workspace) -> None:
    listed, files, log = _removed_by(project, [False, False])
    assert listed == {"trial-1"} and files == {"Pulumi.trial-1.yaml"}, (listed, files)
    assert "The empty stack stays in the backend" in log


def test_a_destroy_that_left_resources_is_made_again_and_the_stack_then_removed(
    project: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C can cut a destroy short with its exit still 0; `pulumi destroy --remove` then refuses
    the removal, as the stack still holds resources. The trial destroys again, until its state is
    empty, and then removes the stack and its file."""
    project.init_stack("trial-1")
    real = automation.pulumi_command
    refused: list[tuple[str, ...]] = []

    def cut_first(target: auto.Stack, *args: str, **kwargs: object) -> auto.CommandResult:
        if not refused:
            refused.append(args)
            raise auto.CommandError(
                auto.CommandResult(stdout="", stderr=f"error: {REMOVAL_REFUSED}", code=255)
            )
        return real(target, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(automation, "pulumi_command", cut_first)
    TrialRunner(project.path, project.path / "logs", "trial", "base").destroy("trial-1")

    assert refused and "--remove" in refused[0]
    assert project.json("stack", "ls", "--json") == []
    assert list((project.path / "stacks").glob("Pulumi.*.yaml")) == []


def test_destroying_a_trial_the_backend_lacks_says_nothing_was_deployed(project: Workspace) -> None:
    """A sweep destroys a trial whose update never created its stack (`_destroyed` takes the
    SpecError as "nothing was deployed"): the destroy, which opens the stack without a look first,
    names the missing stack as the look did."""
    runner = TrialRunner(project.path, project.path / "logs", "trial", "base")

    with pytest.raises(SpecError, match=r"The backend has no stack 'trial-9'\. Check the name"):
        runner.destroy("trial-9")


def test_a_destroy_cut_short_after_the_stack_left_the_backend_takes_its_file_too(
    project: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C reaches `pulumi destroy --remove` too; when it dies after removing the stack from the
    backend, the trial's destroy is done and the stack file goes as well (a full suite run met the
    file left behind: the next sweep run found no stack to settle and left it)."""
    project.init_stack("trial-1")
    real = automation.pulumi_command

    def cut_after(target: auto.Stack, *args: str, **kwargs: object) -> auto.CommandResult:
        real(target, *args, **kwargs)  # type: ignore[arg-type]
        (project.path / "stacks" / "Pulumi.trial-1.yaml").write_text("config: {}\n")  # died before its file
        raise CUT_SHORT

    monkeypatch.setattr(automation, "pulumi_command", cut_after)
    TrialRunner(project.path, project.path / "logs", "trial", "base").destroy("trial-1")

    assert project.json("stack", "ls", "--json") == []
    assert list((project.path / "stacks").glob("Pulumi.*.yaml")) == []
