"""A Pulumi CLI command that fails is reported in the CLI's own words and how it ended, on the
first line a sweep's trial or a terminal shows (``StacksError.summary``): before, that line ended
at the colon, as the Automation API's error text starts with a newline."""

from __future__ import annotations

import pytest
from pulumi import automation as auto

from sglang_stacks.drive import automation
from sglang_stacks.errors import SpecError
from tests._pulumi import Workspace

pytestmark = pytest.mark.integration


def test_a_stack_the_cli_will_not_create_is_refused_in_its_words(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace.enter(monkeypatch)
    with pytest.raises(SpecError) as raised:
        automation.write_stack(workspace.path, "bad name!", {}, "")
    summary = raised.value.summary
    assert summary.startswith(
        "Pulumi could not create stack 'bad name!': error: a stack name may only contain"
    )
    assert "(exit code 1)" in summary and summary.endswith("`. scripts/env.sh`.")


@pytest.mark.parametrize(
    ("result", "words"),
    [
        (
            auto.CommandResult(stdout="", stderr="", code=-2),
            "it printed nothing (the CLI was stopped by SIGINT)",
        ),
        (
            auto.CommandResult(
                stdout="x", stderr="warning: slow\nerror: the stack is locked\nhint", code=255
            ),
            "error: the stack is locked (exit code 255)",
        ),
        (auto.CommandResult(stdout="one\nlast", stderr="", code=2), "last (exit code 2)"),
    ],
)
def test_what_a_failed_command_said_is_one_line(result: auto.CommandResult, words: str) -> None:
    assert automation.said(auto.CommandError(result)) == words
