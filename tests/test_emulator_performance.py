"""The performance and memory models reproduce the tuning campaign's table on the default profile."""

from __future__ import annotations

import pytest

from sglang_emulator.launch import parse_launch_flags, resolve_launch
from sglang_emulator.memory import plan_memory
from sglang_emulator.performance import AcceptSampler, PerformanceModel
from sglang_emulator.profile_loading import load_profile

BASE = "--model /shared/kimi-k2.5-int4 --tp 8 --trust-remote-code --host 0.0.0.0"
EAGLE = (
    "--speculative-algorithm EAGLE --speculative-draft-model-path /data/eagle3 "
    "--speculative-num-steps 2 --speculative-eagle-topk 4 --speculative-num-draft-tokens 4"
)


def model_for(flags: str) -> PerformanceModel:
    profile = load_profile()
    config = resolve_launch("0.5.8", parse_launch_flags("0.5.8", f"{BASE} {flags}".split()), profile)
    return PerformanceModel(config, profile)


@pytest.mark.parametrize(
    ("flags", "campaign_tok_s"),
    [
        ("--cuda-graph-max-bs 512 --disable-custom-all-reduce", 82.0),
        ("--cuda-graph-max-bs 128 --disable-custom-all-reduce", 89.5),
        (f"--cuda-graph-max-bs 512 --disable-custom-all-reduce --mem-fraction-static 0.88 "
         f"--max-running-requests 48 {EAGLE}", 53.0),
        (f"--cuda-graph-max-bs 128 --disable-custom-all-reduce --mem-fraction-static 0.88 {EAGLE}", 54.1),
        ("--cuda-graph-max-bs 128", 38.0),
        ("--cuda-graph-max-bs 512", 38.0),
    ],
)  # fmt: skip
def test_single_stream_decode_matches_the_campaign_within_3_percent(
    flags: str, campaign_tok_s: float
) -> None:
    assert model_for(flags).single_stream_tok_s() == pytest.approx(campaign_tok_s, rel=0.03)


def test_eagle_verify_pass_costs_about_30_ms() -> None:
    model = model_for(f"--cuda-graph-max-bs 128 --disable-custom-all-reduce {EAGLE}")
    draft_ms = model.profile.performance.speculative.draft_forward_ms * 2
    assert model.speculative_cycle_ms(1) - draft_ms == pytest.approx(30.0, abs=1.0)


def test_aggregate_throughput_grows_with_concurrency() -> None:
    model = model_for("--cuda-graph-max-bs 128 --disable-custom-all-reduce")
    aggregate = [b * 1000 / model.decode_step_ms(b) for b in (1, 8, 32, 64, 128)]
    assert aggregate == sorted(aggregate)
    assert aggregate[-1] > 10 * aggregate[0]


def test_auto_mem_fraction_with_eagle_is_0_76_and_runs_out_of_memory() -> None:
    model = model_for(f"--cuda-graph-max-bs 128 --disable-custom-all-reduce {EAGLE}")
    plan = plan_memory(model.config, model.profile)
    assert round(plan.mem_fraction_static, 2) == 0.76
    assert plan.failure is not None and plan.failure.phase == "kv_pool"
    assert "Not enough memory. Please try to increase --mem-fraction-static" in plan.failure.message


def test_baselines_fit_with_the_auto_fraction_and_eagle_fits_at_0_88() -> None:
    for flags in ("--cuda-graph-max-bs 512", "--cuda-graph-max-bs 128",
                  f"--cuda-graph-max-bs 128 --mem-fraction-static 0.88 {EAGLE}"):  # fmt: skip
        model = model_for(flags)
        plan = plan_memory(model.config, model.profile)
        # The pool holds at least the campaign's single request (1,024 prompt + 512 new tokens).
        assert plan.failure is None and plan.max_total_num_tokens > 1024 + 512
        # What the campaign's expert-parallel run logged as free after the weights.
        assert plan.avail_after_load_gib == pytest.approx(21.7, abs=0.01)


def test_memory_held_by_another_server_shrinks_the_pool() -> None:
    model = model_for("--cuda-graph-max-bs 128")
    alone = plan_memory(model.config, model.profile)
    shared = plan_memory(model.config, model.profile, used_by_others_mib=4000)
    assert shared.max_total_num_tokens < alone.max_total_num_tokens
    crowded = plan_memory(model.config, model.profile, used_by_others_mib=80_000)
    assert crowded.failure is not None and crowded.failure.phase == "load"


def test_accept_sampler_is_seeded_and_keeps_the_mean() -> None:
    first = [AcceptSampler(0.5447, 3, seed=7).next() for _ in range(1)]
    sampler_a, sampler_b = AcceptSampler(0.5447, 3, seed=7), AcceptSampler(0.5447, 3, seed=7)
    run_a = [sampler_a.next() for _ in range(100)]
    assert run_a == [sampler_b.next() for _ in range(100)] and first[0] == run_a[0]
    assert set(run_a) == {1, 2, 3}
    mean = 1 + 0.5447 + 0.5447**2
    assert sum(run_a) == pytest.approx(100 * mean, abs=2)
