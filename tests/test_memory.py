import dataclasses
from typing import get_args

import pytest

from sglang_stacks.config.flags import SpeculativeAlgorithm
from sglang_stacks.config.memory import (
    MIN_KV_CACHE_GB,
    MemoryInputs,
    auto_mem_fraction,
    memory_inputs,
    plan_memory,
)
from sglang_stacks.config.stackfile import load_stack_spec
from tests._stacks import STACKS_DIR

# The campaign's host and model: 8 x 96 GB (97887 MiB), TP 8, Kimi-K2.5 with its 27 x 1152 vision tower.
CAMPAIGN = MemoryInputs(
    release="0.5.8",
    total_mib=97887,
    target_weights_gb=72.33,
    tp_size=8,
    cuda_graph_max_bs=128,
    vision_num_layers=27,
    vision_hidden_size=1152,
)
EAGLE = dataclasses.replace(CAMPAIGN, speculative_algorithm="EAGLE", draft_weights_gb=0.3)


def test_sglang_0_5_8_picks_0_76_for_the_campaigns_eagle_run():
    fraction = auto_mem_fraction(EAGLE)
    assert fraction is not None
    assert round(fraction, 2) == 0.76


def test_auto_fraction_reserves_more_for_eagle_and_for_larger_graphs():
    without_draft = auto_mem_fraction(CAMPAIGN)
    bs512 = auto_mem_fraction(dataclasses.replace(CAMPAIGN, cuda_graph_max_bs=512))
    eagle = auto_mem_fraction(EAGLE)
    assert without_draft is not None and bs512 is not None and eagle is not None
    assert eagle < without_draft
    assert bs512 < without_draft


def test_auto_fraction_of_a_text_only_model_is_not_scaled_down():
    text_only = dataclasses.replace(EAGLE, vision_num_layers=None, vision_hidden_size=None)
    # (97887 - 16128 MiB reserved) / 97887, rounded to 3 decimals as SGLang does.
    assert auto_mem_fraction(text_only) == 0.835


def test_auto_fraction_of_other_releases_is_unknown():
    assert auto_mem_fraction(dataclasses.replace(EAGLE, release="0.5.23")) is None


@pytest.mark.parametrize("algorithm", get_args(SpeculativeAlgorithm))
def test_auto_fraction_reserves_for_the_draft_what_the_plan_counts_outside_the_pool(
    algorithm: SpeculativeAlgorithm,
) -> None:
    # SGLang 0.5.8 reserves 2 GB for an EAGLE-like draft, 6 GB for STANDALONE and nothing for NGRAM.
    text_only = dataclasses.replace(CAMPAIGN, vision_num_layers=None, vision_hidden_size=None)
    speculating = dataclasses.replace(text_only, speculative_algorithm=algorithm)
    without, with_draft = auto_mem_fraction(text_only), auto_mem_fraction(speculating)
    assert without is not None and with_draft is not None
    reserve_gb = plan_memory(speculating).draft_reserve_gb
    assert reserve_gb == {"STANDALONE": 6.0, "NGRAM": 0.0}.get(algorithm, 2.0)
    assert without - with_draft == pytest.approx(reserve_gb * 1024 / text_only.total_mib, abs=0.001)


def test_eagle3_with_the_automatic_fraction_does_not_fit():
    plan = plan_memory(EAGLE)
    assert plan.fraction_source == "auto"
    assert plan.verdict == "does_not_fit"
    assert plan.kv_cache_gb is not None and plan.kv_cache_gb < MIN_KV_CACHE_GB
    verdict = plan.explain()[-1]
    assert "does not fit" in verdict
    assert "0.78" in verdict


def test_eagle3_at_0_88_fits_with_room_for_the_kv_cache():
    plan = plan_memory(dataclasses.replace(EAGLE, mem_fraction_static=0.88))
    assert plan.verdict == "fits"
    assert plan.static_pool_gb == pytest.approx(95.59 * 0.88, abs=0.01)
    assert plan.kv_cache_gb == pytest.approx(84.12 - 72.33 - 0.3, abs=0.01)
    assert plan.rest_gb is not None and plan.rest_gb >= plan.rest_needed_gb


def test_smallest_fitting_fraction_lies_between_the_campaigns_two_tries():
    plan = plan_memory(EAGLE)
    assert plan.smallest_fitting_fraction is not None
    assert 0.76 < plan.smallest_fitting_fraction <= 0.88
    at_smallest = plan_memory(dataclasses.replace(EAGLE, mem_fraction_static=plan.smallest_fitting_fraction))
    assert at_smallest.fits
    just_below = plan_memory(
        dataclasses.replace(EAGLE, mem_fraction_static=plan.smallest_fitting_fraction - 0.01)
    )
    assert not just_below.fits


def test_cuda_graph_memory_grows_with_the_captured_batch_size():
    small = plan_memory(dataclasses.replace(CAMPAIGN, cuda_graph_max_bs=128))
    large = plan_memory(dataclasses.replace(CAMPAIGN, cuda_graph_max_bs=512))
    assert large.cuda_graphs_gb == 4 * small.cuda_graphs_gb
    assert large.rest_needed_gb > small.rest_needed_gb
    off = plan_memory(dataclasses.replace(CAMPAIGN, cuda_graph_disabled=True))
    assert off.cuda_graphs_gb == 0
    assert off.cuda_graph_max_bs == 0


def test_a_fraction_too_high_starves_the_graphs_and_names_the_largest_that_fits():
    plan = plan_memory(dataclasses.replace(EAGLE, mem_fraction_static=0.97))
    assert plan.verdict == "does_not_fit"
    assert plan.largest_fitting_fraction is not None and plan.largest_fitting_fraction < 0.97
    assert "largest fraction that fits" in plan.explain()[-1]


def test_weights_larger_than_the_gpu_fit_at_no_fraction():
    plan = plan_memory(dataclasses.replace(CAMPAIGN, target_weights_gb=100.0))
    assert plan.smallest_fitting_fraction is None
    assert "none below 1.0" in plan.explain()[-1]


def test_unknown_fraction_gives_an_unknown_verdict_and_the_smallest_fraction():
    plan = plan_memory(dataclasses.replace(EAGLE, release="0.5.23"))
    assert plan.verdict == "unknown"
    assert plan.kv_cache_gb is None
    assert "unknown" in plan.explain()[-1]
    assert "0.78" in plan.explain()[-1]


def test_plan_of_a_stack_spec_uses_its_host_model_and_draft():
    spec = load_stack_spec("eagle3-bs128", STACKS_DIR)
    plan = plan_memory(spec)
    assert plan == plan_memory(memory_inputs(spec))
    assert plan.total_gb == pytest.approx(97887 / 1024)
    assert plan.mem_fraction_static == 0.88
    assert plan.draft_weights_gb == pytest.approx(2.4 / 8)
    assert plan.draft_reserve_gb == 2.0
    assert plan.fits


def test_plan_for_another_release_than_the_pinned_one():
    spec = load_stack_spec("eagle3-auto-mem", STACKS_DIR)
    assert plan_memory(spec).verdict == "does_not_fit"
    assert plan_memory(spec, "0.5.23").verdict == "unknown"


def test_as_dict_carries_the_derived_figures():
    figures = plan_memory(EAGLE).as_dict()
    assert figures["verdict"] == "does_not_fit"
    assert {"static_pool_gb", "kv_cache_gb", "rest_gb", "rest_needed_gb"} <= set(figures)
