"""Each release's scheduling numbers: recorded from its wheel by running its own code, shipped for
every release with a flag table, overridden by SGLang's own variables, and used as SGLang does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_flags import known_releases
from sglang_flags.wheels import default_cache
from sglang_world.record_scheduling import main as record_main
from sglang_world.record_scheduling import record_from_wheel
from sglang_world.scheduling import SchedulingRulesError, TokenRatio, scheduling_rules

SHIPPED = Path(__file__).resolve().parent.parent / "sglang_world" / "scheduling.json"


def test_every_release_with_a_flag_table_has_its_scheduling_numbers() -> None:
    recorded = json.loads(SHIPPED.read_text())["releases"]
    assert sorted(recorded) == sorted(known_releases())
    for entry in recorded.values():
        assert set(entry["homes"]) == set(entry["values"]) >= set(entry["variables"])


@pytest.mark.parametrize(
    ("release", "ratio_home"),
    [
        ("0.5.1", "sglang.global_config: global_config.default_init_new_token_ratio"),
        ("0.5.8", "sglang.srt.environ: envs.SGLANG_INIT_NEW_TOKEN_RATIO.get()"),
        ("0.5.23", "sglang.srt.environ: envs.SGLANG_INIT_NEW_TOKEN_RATIO.get()"),
    ],
)
def test_the_shipped_numbers_are_what_the_release_wheel_computes(release: str, ratio_home: str) -> None:
    """Read again from the wheel (downloaded with pip unless cached), in a child interpreter that
    imports the release's own modules: the same numbers, from where that release keeps them."""
    recorded = record_from_wheel(release, default_cache())
    assert recorded.refused == []
    shipped = json.loads(SHIPPED.read_text())["releases"][release]
    assert (recorded.values, recorded.variables) == (shipped["values"], shipped["variables"])
    assert recorded.homes["init_new_token_ratio"] == ratio_home
    assert (
        recorded.homes["clip_max_new_tokens"] == "sglang/srt/managers/schedule_policy.py: CLIP_MAX_NEW_TOKENS"
    )


def test_recording_writes_the_table_and_a_missing_release_is_an_error(tmp_path: Path, capsys) -> None:
    table = tmp_path / "scheduling.json"
    assert record_main(["0.5.8", "--table", str(table)]) == 0
    assert json.loads(table.read_text())["releases"]["0.5.8"]["values"]["retract_decode_steps"] == 20
    assert record_main(["0.5.0.post99", "--table", str(table)]) == 2
    assert "pip could not download a wheel of sglang==0.5.0.post99" in capsys.readouterr().err


def test_new_token_ratio_starts_decays_to_its_floor_and_rises_on_a_retraction() -> None:
    rules = scheduling_rules("0.5.8", {})
    ratio = TokenRatio(rules, conservativeness=1.0)
    assert (ratio.init, ratio.current) == (rules.init_new_token_ratio, rules.init_new_token_ratio)
    assert ratio.min == pytest.approx(rules.init_new_token_ratio * rules.min_new_token_ratio_factor)
    for _ in range(int(rules.new_token_ratio_decay_steps) - 1):
        ratio.decay_step()
    assert ratio.current > ratio.min
    ratio.decay_step()
    ratio.decay_step()
    assert ratio.current == pytest.approx(ratio.min)
    # Two requests kept running, 100 tokens decoded of 600 they may generate.
    raised = ratio.after_retract(decoded_tokens=100, max_new_tokens=600, requests=2)
    assert raised == pytest.approx((100 + 2 * rules.retract_decode_steps) / 601)
    assert ratio.current == raised
    ratio.reset()  # the server went idle
    assert ratio.current == ratio.init
    # --schedule-conservativeness scales the start (never above 1) and with it the floor.
    assert TokenRatio(rules, conservativeness=0.5).init == pytest.approx(rules.init_new_token_ratio / 2)
    assert TokenRatio(rules, conservativeness=3.0).init == 1.0


def test_sglangs_variables_override_the_numbers_and_a_bad_one_names_itself() -> None:
    rules = scheduling_rules(
        "0.5.8", {"SGLANG_INIT_NEW_TOKEN_RATIO": "1.0", "SGLANG_RETRACT_DECODE_STEPS": "5"}
    )
    assert (rules.init_new_token_ratio, rules.retract_decode_steps) == (1.0, 5)
    assert scheduling_rules("0.5.8", {}).init_new_token_ratio != 1.0  # the release's own, unset
    # Before 0.5.3.post2 the retraction's steps were a constant no variable reached.
    assert scheduling_rules("0.5.1", {"SGLANG_RETRACT_DECODE_STEPS": "5"}) == scheduling_rules("0.5.1", {})
    with pytest.raises(SchedulingRulesError, match="SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION is 'many'"):
        scheduling_rules("0.5.8", {"SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "many"})
    with pytest.raises(SchedulingRulesError, match=r"python -m sglang_world.record_scheduling 0\.4\.0"):
        scheduling_rules("0.4.0", {})


def test_both_recorders_name_every_release_with_the_same_switch(capsys) -> None:
    """`--all` records every release with a flag table, for the memory rules and the scheduling
    numbers alike; asked for nothing, each says so."""
    from sglang_world.record import main as record_memory_main

    for main in (record_main, record_memory_main):
        with pytest.raises(SystemExit) as exit_info:
            main([])
        assert exit_info.value.code == 2
        assert "or --all" in capsys.readouterr().err
