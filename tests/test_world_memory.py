"""The memory model's arithmetic: the KV cell, the pool in tokens, each phase and where a plan fails."""

from __future__ import annotations

import dataclasses

import pytest

from sglang_world import (
    DeviceFacts,
    DraftFacts,
    KvCell,
    Launch,
    ModelFacts,
    Workload,
    fitting_fractions,
    judged_releases,
    plan_memory,
)
from sglang_world.budget import budget

# The campaign's host and model: 8 x RTX PRO 6000 (97,887 MiB, 611 of it the driver's), Kimi-K2.5
# INT4 at tp 8 (72.33 GB of weights per GPU, 61 layers of 576-wide latents, a 27 x 1152 vision tower).
KIMI = ModelFacts(
    weights_gib=72.33,
    kv=KvCell("mla", 61, latent_dim=576),
    context_length=262144,
    vision=(27, 1152),
    cuda_graph_mib_per_size=20,
    activation_mib_per_token=0.1875,
    draft=DraftFacts(0.3, KvCell("mla", 1, latent_dim=576), 8),
)
RTX = DeviceFacts(total_mib=97887, driver_reserved_mib=611, runtime_mib=0.966 * 1024)
BASELINE = Launch(tp_size=8, cuda_graph_max_bs=512)
EAGLE = Launch(
    tp_size=8, cuda_graph_max_bs=128, speculative_algorithm="EAGLE", speculative_num_draft_tokens=4
)
CAMPAIGN_REQUEST = Workload(input_len=1024, output_len=512)


def test_an_mla_cell_is_one_latent_per_layer_on_every_gpu() -> None:
    cell = KvCell("mla", 61, latent_dim=576)
    assert cell.bytes_per_token(attn_tp_size=1) == cell.bytes_per_token(attn_tp_size=8) == 576 * 61 * 2


def test_an_mha_cell_splits_its_heads_over_the_gpus_and_fp8_halves_it() -> None:
    llama = KvCell("mha", 32, kv_heads=8, head_dim=128)
    whole = 8 * 128 * 2 * 32 * 2
    assert llama.bytes_per_token(attn_tp_size=1) == whole
    assert llama.bytes_per_token(attn_tp_size=2) == whole // 2
    # More GPUs than KV heads: each GPU keeps one head.
    assert llama.bytes_per_token(attn_tp_size=16) == llama.bytes_per_token(attn_tp_size=8) == whole // 8
    assert llama.bytes_per_token(attn_tp_size=1, kv_cache_dtype="fp8_e4m3") == whole // 2
    assert llama.bytes_per_token(kv_cache_dtype="fp4_e2m1") is None


def test_the_pool_is_what_the_fraction_of_measured_free_memory_leaves_after_the_weights() -> None:
    plan = plan_memory("0.5.8", dataclasses.replace(BASELINE, mem_fraction_static=0.88), KIMI, RTX)
    numbers = plan.budget
    assert numbers is not None
    # Free when SGLang measures it: the total less the driver's reserve and the runtime (21.70 GB is
    # what the campaign's log showed free after the weights).
    assert numbers.free_after_init_gib - KIMI.weights_gib == pytest.approx(21.70, abs=0.01)
    rest = 0.88 * numbers.free_after_init_gib - KIMI.weights_gib
    assert numbers.kv_pool_gib == pytest.approx(rest)
    assert numbers.max_total_num_tokens == int(rest * 2**30) // (576 * 61 * 2)
    assert numbers.kv_cell_bytes == 576 * 61 * 2


def test_running_requests_come_from_the_pool_unless_set() -> None:
    derived = plan_memory("0.5.8", BASELINE, KIMI, RTX).budget
    assert derived is not None and derived.max_total_num_tokens is not None
    assert derived.max_running_requests == derived.max_total_num_tokens // 2
    limited = plan_memory("0.5.8", dataclasses.replace(BASELINE, max_running_requests=32), KIMI, RTX).budget
    assert limited is not None and limited.max_running_requests == 32
    # The graphs never capture a batch larger than the request slots, but always the largest one.
    assert limited.captured_batch_sizes is not None and max(limited.captured_batch_sizes) == 32


def test_the_seeds_eagle3_at_the_automatic_fraction_fails_where_the_campaign_did() -> None:
    plan = plan_memory("0.5.8", EAGLE, KIMI, RTX, CAMPAIGN_REQUEST)
    assert round(plan.mem_fraction_static or 0, 2) == 0.76
    assert plan.verdict == "does_not_fit" and plan.failure is not None
    assert plan.failure.phase == "kv_pool"
    assert plan.failure.message.startswith("RuntimeError: Not enough memory. Please try to increase")


@pytest.mark.parametrize(
    "launch",
    [
        BASELINE,
        dataclasses.replace(BASELINE, cuda_graph_max_bs=128),
        dataclasses.replace(EAGLE, mem_fraction_static=0.88),
    ],
)
def test_the_seeds_that_ran_fit(launch: Launch) -> None:
    plan = plan_memory("0.5.8", launch, KIMI, RTX, CAMPAIGN_REQUEST)
    assert plan.verdict == "fits", plan.failure


def test_the_fractions_that_fit_are_an_interval_whose_ends_fit_and_whose_neighbours_do_not() -> None:
    smallest, largest = fitting_fractions("0.5.8", EAGLE, KIMI, RTX, CAMPAIGN_REQUEST)
    assert smallest is not None and largest is not None and 0.76 < smallest <= 0.88 <= largest < 1
    for fraction, fits in (
        (smallest, True),
        (largest, True),
        (smallest - 0.01, False),
        (largest + 0.01, False),
    ):
        at = dataclasses.replace(EAGLE, mem_fraction_static=round(fraction, 2))
        assert plan_memory("0.5.8", at, KIMI, RTX, CAMPAIGN_REQUEST).fits is fits, fraction


def test_each_phase_fails_with_what_sglang_prints() -> None:
    crowded = dataclasses.replace(RTX, others_mib=30_000)
    assert plan_memory("0.5.8", BASELINE, KIMI, crowded).failure.phase == "load"  # type: ignore[union-attr]
    heavy_graphs = dataclasses.replace(KIMI, cuda_graph_mib_per_size=400)
    graphs = plan_memory(
        "0.5.8", dataclasses.replace(BASELINE, mem_fraction_static=0.9), heavy_graphs, RTX
    ).failure
    assert graphs is not None and graphs.phase == "graphs"
    assert "Capture cuda graph failed" in graphs.message and "Possible solutions" in graphs.message
    big_chunk = dataclasses.replace(BASELINE, mem_fraction_static=0.95, chunked_prefill_size=16384)
    prefill = plan_memory("0.5.8", big_chunk, KIMI, RTX).failure
    assert prefill is not None and prefill.phase == "prefill"
    assert "torch.OutOfMemoryError: CUDA out of memory" in prefill.message
    long_prompts = Workload(input_len=5000, output_len=16)
    tiny = plan_memory("0.5.8", BASELINE, KIMI, RTX, long_prompts).failure
    assert (
        tiny is not None and tiny.phase == "workload" and "exceeds the maximum allowed length" in tiny.message
    )


def test_what_the_plan_cannot_judge_is_unknown_with_the_reason() -> None:
    no_cell = dataclasses.replace(KIMI, kv=None)
    unknown = plan_memory("0.5.8", dataclasses.replace(BASELINE, mem_fraction_static=0.85), no_cell, RTX)
    assert unknown.verdict == "unknown" and "KV cell" in (unknown.unknown_reason or "")
    # Unknown facts do not hide a failure that is certain without them.
    starved = plan_memory("0.5.8", dataclasses.replace(BASELINE, mem_fraction_static=0.5), no_cell, RTX)
    assert starved.verdict == "does_not_fit"
    post_capture = dataclasses.replace(BASELINE, environment=(("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING", "1"),))
    assert plan_memory("0.5.8", post_capture, KIMI, RTX).verdict == "unknown"
    assert "0.5.8" in judged_releases()


def test_with_attention_dp_each_gpu_keeps_every_kv_head_of_its_attention_group() -> None:
    """Attention DP over the 8 GPUs leaves each GPU an attention group of its own: its pool cell holds
    all 8 of Llama's KV heads, as SGLang 0.5.23's own pool code sizes it (benchmarks/execution_report.py,
    580 of 580 pools). The plan divided them over the 8 GPUs and counted 8 times the tokens."""
    llama = ModelFacts(
        weights_gib=15.0, kv=KvCell("mha", 32, kv_heads=8, head_dim=128), context_length=131072
    )
    whole = 8 * 128 * 2 * 32 * 2

    for attn_dp, cell in ((8, whole), (2, whole // 4), (1, whole // 8)):
        numbers = plan_memory("0.5.8", Launch(tp_size=8, attn_dp_size=attn_dp), llama, RTX).budget
        assert numbers is not None and numbers.max_total_num_tokens is not None
        assert numbers.max_total_num_tokens == int(numbers.kv_pool_gib * 2**30) // cell


def test_a_pool_sized_before_the_draft_loads_leaves_the_drafts_weights_and_kv_for_after() -> None:
    """0.5.10 to 0.5.13's own pool code sizes the target's pool before the draft model loads, as
    0.5.8's does: the same budget, cell and draft phase. From 0.5.14 the draft's weights are loaded
    first (its budget 0.3 GB smaller) and its one layer of KV is in the pool's cell."""
    launch = dataclasses.replace(EAGLE, mem_fraction_static=0.88)
    plan = plan_memory("0.5.8", launch, KIMI, RTX)
    assert plan.settings is not None and plan.budget is not None and KIMI.draft is not None
    rest = plan.budget.kv_pool_gib
    after = dataclasses.replace(plan.settings, executed=True, kv_budget_gib=rest, draft_after_pool=True)
    inside = dataclasses.replace(after, kv_budget_gib=rest - KIMI.draft.weights_gib, draft_after_pool=False)
    before_the_draft, with_the_draft = budget(after, launch, KIMI, RTX), budget(inside, launch, KIMI, RTX)
    assert before_the_draft == plan.budget and not before_the_draft.draft_in_pool
    assert with_the_draft.draft_in_pool and with_the_draft.kv_cell_bytes == 576 * 62 * 2
    loaded = before_the_draft.free_after("load")
    assert loaded is not None and with_the_draft.free_after("load") == pytest.approx(loaded - 0.3)


def test_other_fractions_are_tried_with_their_own_pools_not_the_launchs() -> None:
    """The release's pool code sized the launch's pool, 15,485 tokens at 0.78: a 30,000-token prompt
    needs a larger fraction's pool, and each fraction tried is planned with its own."""
    launch = dataclasses.replace(BASELINE, mem_fraction_static=0.78)
    plan = plan_memory("0.5.8", launch, KIMI, RTX)
    numbers = plan.budget
    assert plan.settings is not None and numbers is not None and numbers.max_total_num_tokens == 15485
    by_step = tuple(step / 100 * numbers.free_after_init_gib - KIMI.weights_gib for step in range(1, 100))
    executed = dataclasses.replace(
        plan.settings,
        executed=True,
        kv_budget_gib=numbers.kv_pool_gib,
        kv_budget_by_step=by_step,
        kv_tokens=numbers.max_total_num_tokens,
        running_limit=numbers.max_running_requests,
    )
    long_prompt = Workload(input_len=30000, output_len=8)
    ours = fitting_fractions("0.5.8", launch, KIMI, RTX, long_prompt)
    assert fitting_fractions("0.5.8", launch, KIMI, RTX, long_prompt, executed) == ours == (0.8, 0.95)
