"""python -m sglang_world.add_release: a release added in one command says what changed against the
one before it and proves the project's rules against what its own code resolved."""

from __future__ import annotations

import pytest

from sglang_world import add_release, releases


def test_the_newest_release_reports_its_changes_and_its_rules_hold(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert add_release.main(["0.5.23", "--report"]) == 0
    said = capsys.readouterr().out
    assert "What changed against 0.5.22:" in said
    assert "--enable-paged-experts" in said.split("flags added:")[1].splitlines()[0]
    assert "flags removed: --speculative-skip-dp-mlp-sync" in said
    assert "memory settings: 0 of 10080 grid points resolved differently" in said
    assert "The project's rules for 0.5.23 give what its own code resolved at all 10080 points." in said


def test_a_release_without_rules_is_told_which_it_can_share(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a new release is before anyone writes its entry: the previous release's rules are proved
    against its recording, and the line to add is named."""
    monkeypatch.setattr(
        releases, "RELEASE_RULES", {r: v for r, v in releases.RELEASE_RULES.items() if r != "0.5.23"}
    )
    assert add_release.main(["0.5.23", "--report"]) == 1
    said = capsys.readouterr().out
    assert (
        "0.5.22's rules give what 0.5.23's own code resolved at all 10080 points: "
        'add "0.5.23" beside "0.5.22"' in said
    )


def test_rules_that_do_not_hold_are_shown_where_they_differ(capsys: pytest.CaptureFixture[str]) -> None:
    differing = add_release.prove_rules("0.5.23", "0.5.8")
    assert differing, "0.5.8's rules cannot hold for 0.5.23: its GPU-size defaults and reserves differ"
    assert all("the rules" in line for line in differing[:5])
