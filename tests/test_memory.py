"""A stack's memory plan: the world model's, for the stack's launch, model and host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from sglang_flags import release_key
from sglang_stacks.config.memory import MemoryPlan, fitting_fraction, plan_memory
from sglang_stacks.config.memory_advice import memory_advice
from sglang_stacks.config.memory_text import explain
from sglang_stacks.config.preflight import run_preflight
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_stacks.results.outputs import MemoryPlanOutput
from sglang_world import judged_releases
from tests._stacks import STACKS_DIR

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from emulated_trials import Workload, emulate

ONE_REQUEST = Workload(input_len=64, output_len=8, concurrency=(1,), warmup_requests=0, repetitions=1,
                       requests_per_repetition=1)  # fmt: skip


def test_the_plan_of_a_stack_uses_its_host_model_draft_and_the_emulators_facts() -> None:
    plan = plan_memory(load_stack_spec("eagle3-bs128", STACKS_DIR))
    assert plan.release == "0.5.8" and plan.verdict == "fits"
    assert plan.total_gb == pytest.approx(97887 / 1024)
    # 21.70 GB free after the weights, as the campaign's own log showed on this host.
    assert plan.free_after_init_gb is not None and plan.target_weights_gb is not None
    assert plan.target_weights_gb == pytest.approx(72.33)
    assert plan.free_after_init_gb - plan.target_weights_gb == pytest.approx(21.70, abs=0.01)
    assert plan.mem_fraction_static == 0.88 and plan.fraction_source == "set"
    assert plan.draft_weights_gb == pytest.approx(2.4 / 8)
    # Speculative decoding runs 48 requests; the graphs are captured up to 48, not 128.
    assert plan.max_running_requests == 48
    assert plan.captured_batch_sizes is not None and max(plan.captured_batch_sizes) == 48
    assert plan.max_total_num_tokens is not None and plan.max_total_num_tokens > 100_000


def test_the_seeds_out_of_memory_names_the_phase_sglangs_message_and_the_fraction_that_fits() -> None:
    plan = plan_memory(load_stack_spec("eagle3-auto-mem", STACKS_DIR))
    assert plan.verdict == "does_not_fit" and plan.fraction_source == "auto"
    assert round(plan.mem_fraction_static or 0, 2) == 0.76
    assert plan.failure_phase == "kv_pool"
    assert plan.failure is not None and "Not enough memory" in plan.failure
    assert plan.smallest_fitting_fraction is not None and 0.76 < plan.smallest_fitting_fraction <= 0.88
    verdict = explain(plan)[-1]
    assert "does not fit" in verdict and f"{plan.smallest_fitting_fraction:.2f}" in verdict
    assert "SGLang 0.5.8" in verdict
    assert fitting_fraction(load_stack_spec("eagle3-auto-mem", STACKS_DIR)) == plan.smallest_fitting_fraction


@pytest.mark.parametrize("release", judged_releases())
def test_every_release_judges_the_shipped_baseline(release: str) -> None:
    plan = plan_memory(load_stack_spec("baseline-bs128", STACKS_DIR), release)
    assert plan.release == release and plan.verdict in ("fits", "does_not_fit"), plan.unknown_reason
    assert f"SGLang {release}'s settings" in " ".join(explain(plan))


def test_a_stack_whose_flags_the_release_lacks_is_not_judged() -> None:
    plan = plan_memory(load_stack_spec("ep-a2a", STACKS_DIR), "0.5.8")
    assert plan.verdict == "unknown" and "cannot be rendered" in (plan.unknown_reason or "")


def test_outputs_written_by_the_earlier_planner_still_read() -> None:
    earlier = {
        "total_gb": 95.5928,
        "mem_fraction_static": 0.88,
        "fraction_source": "set",
        "target_weights_gb": 72.33,
        "draft_weights_gb": 0.3,
        "cuda_graph_max_bs": 128,
        "cuda_graphs_gb": 0.25,
        "activations_gb": 5.5,
        "draft_reserve_gb": 2.0,
        "smallest_fitting_fraction": 0.78,
        "largest_fitting_fraction": 0.9,
        "static_pool_gb": 84.1217,
        "kv_cache_gb": 11.4917,
        "rest_gb": 11.4711,
        "rest_needed_gb": 7.75,
        "verdict": "fits",
    }
    plan = MemoryPlan.model_validate(earlier)
    assert plan.fits and plan.kv_cache_gb == pytest.approx(11.4917) and plan.release is None


def test_the_stack_outputs_carry_the_plan_and_read_it_back() -> None:
    plan = plan_memory(load_stack_spec("baseline", STACKS_DIR))
    exported = TypeAdapter(MemoryPlanOutput).dump_python(plan)
    assert exported["release"] == "0.5.8" and exported["verdict"] == "fits"
    assert exported["max_total_num_tokens"] == plan.max_total_num_tokens
    read_back = TypeAdapter(MemoryPlanOutput).validate_python(exported)
    assert read_back.max_total_num_tokens == plan.max_total_num_tokens and read_back.release == "0.5.8"


@pytest.mark.parametrize("release", judged_releases())
def test_the_seeds_out_of_memory_is_stopped_on_every_release_where_the_emulator_fails_it(
    release: str,
) -> None:
    """EAGLE-3 at the automatic fraction: preflight stops it exactly where the emulator, playing that
    release, fails to start it. From 0.5.9 (the first release with Kimi-K2.5's model class) the
    release's own code resolves the fraction; 0.5.14 and 0.5.15 keep no draft reserve, so both let it
    run; from 0.5.16 the release's own pool code counts the draft's weights and refuses in its words."""
    spec = load_stack_spec("eagle3-auto-mem", STACKS_DIR)
    pinned = spec.model_copy(
        update={"environment": spec.environment.model_copy(update={"sglang_release": release})}
    )
    errors = [f.code for f in run_preflight(pinned, release) if f.severity == "error"]
    trial = emulate(pinned, ONE_REQUEST)
    assert ("memory-does-not-fit" in errors) == (trial.failure is not None), (errors, trial.failure)
    key = release_key(release)
    if trial.failure is not None and key >= (0, 5, 16, 0):
        assert trial.failure.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache")
    elif trial.failure is not None:
        assert trial.failure.startswith("RuntimeError: Not enough memory")
    assert ("memory-does-not-fit" in errors) == (not (0, 5, 14, 0) <= key < (0, 5, 16, 0))


def test_a_server_failures_fix_reads_the_plans_fractions_for_its_release() -> None:
    advice = memory_advice(load_stack_spec("eagle3-auto-mem", STACKS_DIR))
    assert advice.release == "0.5.8" and advice.mem_fraction_static is None
    assert advice.fraction_in_effect is not None and round(advice.fraction_in_effect, 2) == 0.76
    assert advice.smallest_fitting_fraction == 0.77 and advice.largest_fitting_fraction is not None
    assert advice.weights_gb == pytest.approx(72.33 + 2.4 / 8)
    assert advice.cuda_graph_max_bs == 48  # speculative decoding's 48 request slots cap the graphs
    assert "SGLang 0.5.8 chose 0.76" in advice.setting


@pytest.mark.parametrize(
    ("gpu_model", "said"),
    [
        ("NVIDIA H200", "measured on one NVIDIA H200 (driver 580"),
        ("NVIDIA H100 80GB HBM3", "assumed: no measurement of the NVIDIA H100 80GB HBM3 is on record"),
    ],
)
def test_the_plan_says_where_the_memory_gone_before_loading_comes_from(gpu_model: str, said: str) -> None:
    """The driver's reserve and the runtime's memory (CUDA context, cuBLAS, NCCL) are a measurement
    of one H200: on that GPU the plan cites it, on another it says the figure is assumed; on the
    emulator host, that its figure is back-computed from the campaign's log, not measured."""
    shipped = load_stack_spec("baseline", STACKS_DIR)
    emulated = plan_memory(shipped)
    environment = shipped.environment.model_copy(update={"runtime": "sglang"})
    host = shipped.host.model_copy(update={"gpu_model": gpu_model})
    real = plan_memory(shipped.model_copy(update={"environment": environment, "host": host}))

    assert real.free_memory_from is not None and real.free_memory_from.startswith(said)
    assert f"cuBLAS and NCCL: {real.free_memory_from})." in explain(real)[0]
    assert emulated.free_memory_from is not None
    assert emulated.free_memory_from.startswith("not measured on an RTX PRO 6000: back-computed")
    assert "back-computed from the 21.70 GB free after loading" in explain(emulated)[0]
