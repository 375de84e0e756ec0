"""Stack files are edited as YAML that keeps what their authors wrote: comments, key order, quoting
and number formats; only the edited keys change."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sglang_stacks.config.stackfile import StackText, stack_file_text, write_stack_file
from tests._stacks import STACKS_DIR


@pytest.mark.parametrize("path", sorted(STACKS_DIR.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_every_shipped_stack_file_comes_back_unchanged_from_an_edit_of_nothing(path: Path) -> None:
    text = path.read_text()

    assert StackText(text, path.name).text() == text


def test_removing_the_first_section_keeps_the_comment_that_introduces_the_next() -> None:
    text = (
        "config:\n"
        "  sglang-stacks:draftModel:\n"
        "    source: host\n"
        "  # The server, as tuned.\n"
        "  sglang-stacks:server:\n"
        "    tp_size: 8\n"
    )
    edited = StackText(text)

    edited.put_section("draftModel", None)

    assert edited.text() == "config:\n  # The server, as tuned.\n  sglang-stacks:server:\n    tp_size: 8\n"


def test_a_section_added_goes_last_in_config_before_the_comments_that_end_it() -> None:
    text = 'encryptionsalt: "v1:x"\nconfig:\n  sglang-stacks:server:\n    tp_size: 8\n  # last words\n'
    edited = StackText(text)

    edited.put_section("gate", {"baseline_stack": "baseline", "tolerance_pct": 5})

    assert edited.text() == (
        'encryptionsalt: "v1:x"\nconfig:\n  sglang-stacks:server:\n    tp_size: 8\n'
        "  sglang-stacks:gate:\n    baseline_stack: baseline\n    tolerance_pct: 5\n  # last words\n"
    )


def test_a_written_stack_file_keeps_the_secrets_settings_pulumi_wrote(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.trial.yaml"
    path.write_text("encryptionsalt: v1:salt\nconfig:\n  sglang-stacks:server:\n    tp_size: 4\n")

    write_stack_file(path, {"server": {"tp_size": 8}, "fleet": {"hosts": [{"kind": "emulator"}]}}, "A\nB")

    assert path.read_text() == (
        "# A\n# B\n"
        "encryptionsalt: v1:salt\n"
        "config:\n"
        "  sglang-stacks:server:\n"
        "    tp_size: 8\n"
        "  sglang-stacks:fleet:\n"
        "    hosts:\n"
        "      - kind: emulator\n"
    )
    assert yaml.safe_load(stack_file_text({"server": {"tp_size": 8}})) == {
        "config": {"sglang-stacks:server": {"tp_size": 8}}
    }
