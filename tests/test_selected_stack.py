"""How companion commands read stacks: none changes which stack is selected in the user's
workspace (a bare `pulumi up` typed afterwards deploys the stack the user selected, not the one a
command last read), and a read that meets a running update's checkpoint mid-write reads again."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sglang_stacks.campaign.trial import TrialRunner
from sglang_stacks.drive import _workspace, automation
from sglang_stacks.errors import SpecError
from tests._pulumi import Workspace

STACK_CONFIG = """\
config:
  sglang-stacks:host: {kind: emulator}
  sglang-stacks:model: {path: /models/m, weights_per_gpu_gb: 20}
  sglang-stacks:server: {tp_size: 2, disable_custom_all_reduce: true}
"""


@pytest.fixture
def two_stacks(workspace: Workspace) -> Workspace:
    """`mine` and `other` in the backend, `mine` selected (as `pulumi stack select mine` leaves it)."""
    for stack in ("mine", "other"):
        workspace.init_stack(stack, STACK_CONFIG)
    workspace.run("stack", "select", "mine")
    return workspace


def _selected(workspace: Workspace) -> str:
    return workspace.run("stack", "--show-name").stdout.strip()


@pytest.mark.integration
@pytest.mark.parametrize(
    "command",
    [
        ("compare", "mine", "other"),
        ("compare", "other", "mine"),
        ("logs", "other"),
        ("recover", "other"),
        ("render", "other"),
        ("history", "other"),
    ],
    ids=lambda command: " ".join(command),
)
def test_a_companion_command_leaves_the_selected_stack(
    two_stacks: Workspace, command: tuple[str, ...]
) -> None:
    assert _selected(two_stacks) == "mine"
    two_stacks.cli(*command)  # whatever it finds to say of undeployed stacks
    assert _selected(two_stacks) == "mine"


@pytest.mark.integration
def test_reading_and_creating_stacks_through_the_automation_api_selects_none(
    two_stacks: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the campaign's trials and the rollout do in the user's folder: open a stack, read its
    config and outputs, create a new one with its file."""
    two_stacks.enter(monkeypatch)
    assert automation.stack_config("other", two_stacks.path)["sglang-stacks:server"]["tp_size"] == 2
    assert automation.stack_outputs("other", two_stacks.path) == {}
    created = automation.write_stack(two_stacks.path, "trial-1", {"host": {"kind": "emulator"}}, "a trial")
    assert created.name == "trial-1"
    assert "trial-1" in two_stacks.run("stack", "ls").stdout
    assert _selected(two_stacks) == "mine"
    with pytest.raises(Exception, match="no stack 'missing'"):
        automation.select_stack(two_stacks.path, "missing")
    assert _selected(two_stacks) == "mine"


@pytest.mark.integration
def test_a_read_that_meets_an_update_writing_its_checkpoint_reads_again(
    two_stacks: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local backend rewrites a stack's ``.json.attrs`` in place at every checkpoint of an
    update; `sglang-stacks logs -f` started beside `pulumi up` met it empty and stopped with
    Pulumi's "failed to load checkpoint: EOF"."""
    two_stacks.enter(monkeypatch)
    attrs = two_stacks.backend / ".pulumi" / "stacks" / "sglang-stacks" / "other.json.attrs"
    written = attrs.read_text()
    attrs.write_text("")  # caught between the truncation and the write
    healed = threading.Timer(0.3, attrs.write_text, (written,))
    healed.start()
    try:
        assert automation.stack_config("other", two_stacks.path)["sglang-stacks:server"]["tp_size"] == 2
    finally:
        healed.join()
    attrs.write_text("")  # a file that stays torn is not read for ever
    with pytest.raises(SpecError, match=r"could not read stack 'other'.*other\.json\.attrs.*delete"):
        automation.stack_config("other", two_stacks.path)


@pytest.mark.integration
def test_reading_outputs_takes_one_cli_process_and_decrypts_no_secret(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every companion read of a stack's outputs (and every update of a trial or rollout) asks the
    CLI once, without ``--show-secrets``: a secret output reads ``[secret]`` as every reader takes
    it. The Automation API's own read ran the CLI twice, the second time decrypting secrets."""
    workspace.use_program(
        'import pulumi\npulumi.export("plain", "x")\npulumi.export("token", pulumi.Output.secret("s3cret"))\n'
    )
    workspace.init_stack("outs")
    workspace.run("up", "--yes", "--skip-preview", "-s", "outs")
    workspace.enter(monkeypatch)
    asked: list[list[str]] = []
    real = _workspace.Command.run

    def counted(self: _workspace.Command, args: list[str], *rest: Any, **kwargs: Any) -> object:
        asked.append(list(args))
        return real(self, args, *rest, **kwargs)

    monkeypatch.setattr(_workspace.Command, "run", counted)
    assert automation.stack_outputs("outs", workspace.path) == {"plain": "x", "token": "[secret]"}
    reads = [args for args in asked if args[:2] == ["stack", "output"]]
    assert len(reads) == 1 and "--show-secrets" not in reads[0], asked


@pytest.mark.integration
def test_a_trials_life_asks_the_cli_only_what_it_reads(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A campaign's trial: its new stack created with one CLI process (no look first), nothing
    decrypted that no caller reads (the state read with secrets left encrypted, where the Automation
    API's export decrypts them; the update's summary read without them), and destroyed and removed
    by one more: ``pulumi destroy --remove`` (a destroy, its summary's read, a read of the state and
    a ``stack rm`` were four)."""
    workspace.use_program(
        'import pulumi\npulumi.export("plain", "x")\npulumi.export("token", pulumi.Output.secret("s3cret"))\n'
    )
    workspace.enter(monkeypatch)
    asked: list[list[str]] = []
    real = _workspace.Command.run

    def counted(self: _workspace.Command, args: list[str], *rest: Any, **kwargs: Any) -> object:
        asked.append([arg for arg in args if arg != "--non-interactive"])
        return real(self, args, *rest, **kwargs)

    monkeypatch.setattr(_workspace.Command, "run", counted)
    created = automation.write_stack(workspace.path, "trial-1", {}, "a trial")
    assert [args[:2] for args in asked] == [["stack", "init"]], asked
    # A stack that exists already is opened, not created twice.
    assert automation.write_stack(workspace.path, "trial-1", {}, "again").name == "trial-1"
    asked.clear()
    assert created.up(color="never", show_secrets=False).outputs["token"].secret
    state = created.export_stack()
    assert [args[:2] for args in asked if args[:2] != ["stack", "history"]] == [
        ["up", "--yes"], ["stack", "output"], ["stack", "export"]
    ], asked  # fmt: skip
    assert "s3cret" not in str(state.deployment)
    assert any(r["type"] == "pulumi:pulumi:Stack" for r in (state.deployment or {})["resources"])
    asked.clear()

    runner = TrialRunner(workspace.path, workspace.path / "logs", "trial", "base")
    runner.destroy("trial-1")

    assert [args[:2] for args in asked] == [["destroy", "--yes"]] and "--remove" in asked[0], asked
    assert not any("--show-secrets" in args for args in asked), asked
    assert [stack["name"] for stack in workspace.json("stack", "ls", "--json")] == []
    assert not (workspace.path / "stacks" / "Pulumi.trial-1.yaml").exists()
    assert "The resources in the stack have been deleted" in runner.log_path("trial-1").read_text()


@pytest.mark.integration
def test_the_tools_pulumi_runs_without_proportional_garbage_collection_unless_the_user_says(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An update the tool runs gets `GO_RUNTIME` (a short `pulumi` spends a third less CPU), as its
    program sees in its environment; a user's own ``GOGC`` is left as it is, and no limit added."""
    workspace.use_program(
        "import os\nimport pulumi\n"
        'pulumi.export("gogc", os.environ.get("GOGC", "unset"))\n'
        'pulumi.export("limit", os.environ.get("GOMEMLIMIT", "unset"))\n'
    )
    workspace.enter(monkeypatch)
    for name in _workspace.GO_RUNTIME:
        monkeypatch.delenv(name, raising=False)
    stack = automation.write_stack(workspace.path, "gc", {}, "a trial")

    def seen() -> dict[str, str]:
        outputs = stack.up(color="never", show_secrets=False).outputs
        return {name: output.value for name, output in outputs.items()}

    assert seen() == {"gogc": "off", "limit": "256MiB"}
    monkeypatch.setenv("GOGC", "200")
    assert seen() == {"gogc": "200", "limit": "unset"}
