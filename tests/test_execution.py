"""Judgement by execution: a stack that names its model's config.json is judged by its release's own
code, run from the release's wheel (``sglang_world.execute``), and preflight, the plan and the emulator
take its settings and its refusals, in SGLang's words."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_flags import release_child
from sglang_stacks.config.execution import execute_all, executed, question
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.memory_facts import stack_launch
from sglang_stacks.config.preflight import run_preflight
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_stacks.errors import SpecError
from sglang_world import DeviceFacts, KvCell, Launch, ModelFacts, ModelKind, resolve_settings
from sglang_world.execute import Machine, Question, execute, measured
from sglang_world.launch import launch_from_argv
from sglang_world.models import config_context_length, config_kv_cell, public_model
from tests._stacks import STACKS_DIR

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from emulated_trials import Workload, emulate

ONE_REQUEST = Workload(input_len=64, output_len=8, concurrency=(1,), warmup_requests=0, repetitions=1,
                       requests_per_repetition=1)  # fmt: skip


def _pinned(stack: str, release: str, **server: object) -> StackSpec:
    spec = load_stack_spec(stack, STACKS_DIR)
    environment = spec.environment.model_copy(update={"sglang_release": release})
    return spec.model_copy(
        update={"environment": environment, "server": spec.server.model_copy(update=server)}
    )


def _served(spec: StackSpec) -> StackSpec:
    """``spec`` with DeepSeek-V3's ``config.json`` on 0.5.8, which has no class for Kimi-K2.5 (it
    arrived in 0.5.9): Kimi-K2.5's text model has its shape, 61 layers of a 576-wide MLA cache."""
    if spec.environment.sglang_release != "0.5.8":
        return spec
    return spec.model_copy(update={"model": spec.model.model_copy(update={"config": "deepseek-v3"})})


def _out_of_reach(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """Every release's wheel out of reach: an empty cache and a package index that refuses."""
    monkeypatch.setenv("SGLANG_STACKS_CACHE", str(cache))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")


def _emulate(spec: StackSpec) -> str | None:
    """How the emulator, launching ``spec`` in virtual time, fails (None: it serves)."""
    failure: str | None = emulate(spec, ONE_REQUEST).failure
    return failure


def test_the_shipped_ep_a2a_stack_is_refused_with_sglangs_own_assertion() -> None:
    """0.5.23's argument resolution asserts the flashinfer all-to-all needs attention DP over every
    TP rank: preflight refuses it in those words, nothing launched, and the emulator stops there."""
    spec = load_stack_spec("ep-a2a", STACKS_DIR)
    refused = [f for f in run_preflight(spec, "0.5.23") if f.code == "release-refuses"]
    assert len(refused) == 1 and refused[0].severity == "error", refused
    said = refused[0].message
    assert "AssertionError: Flashinfer MoE A2A requires --attn-dp-size equal to --tp-size" in said
    assert refused[0].key == "server.attn_dp_size" and "Nothing was launched" in refused[0].fix
    failure = _emulate(spec)
    assert failure is not None and failure.startswith("AssertionError: Flashinfer MoE A2A requires")


def test_the_seeds_baseline_on_0_5_23_is_refused_where_its_pool_code_refuses() -> None:
    """Before, the plan said "fits" with 3,210 tokens (its 0.5.8 arithmetic and a fraction 0.014
    too high); 0.5.23's own code picks 0.7578 and its pool code finds no room for the KV cache."""
    spec = _pinned("baseline", "0.5.23")
    plan = plan_memory(spec)
    assert plan.settings_from == "SGLang 0.5.23's own code"
    assert plan.mem_fraction_static == pytest.approx(0.7578, abs=5e-4)
    model = ModelKind(mla=True, vision=(27, 1152))
    launch_fraction = resolve_settings("0.5.23", _launch(spec), spec.host.memory_per_gpu_mib, model)
    assert launch_fraction is not None and launch_fraction.mem_fraction_static != plan.mem_fraction_static
    assert plan.verdict == "does_not_fit" and plan.failure_phase == "kv_pool"
    assert plan.failure is not None and plan.failure.startswith(
        "ValueError: Loaded weights leave no GPU memory for the KV cache"
    )
    assert "Raise --mem-fraction-static above 0.770" in plan.failure
    assert plan.smallest_fitting_fraction == 0.78  # the fix preflight names, above SGLang's 0.770
    errors = [f.code for f in run_preflight(spec, "0.5.23") if f.severity == "error"]
    assert errors == ["memory-does-not-fit"]
    failure = _emulate(spec)
    assert failure is not None and failure.startswith("ValueError: Loaded weights leave no GPU memory")


def test_the_fraction_preflight_names_runs_on_0_5_23() -> None:
    spec = _pinned("baseline", "0.5.23", mem_fraction_static=0.78)
    plan = plan_memory(spec)
    assert plan.verdict == "fits" and plan.pool_from == "SGLang 0.5.23's own pool code"
    assert plan.kv_cache_gb is not None and 0 < plan.kv_cache_gb < 1.0
    assert [f.code for f in run_preflight(spec, "0.5.23") if f.severity == "error"] == []
    assert _emulate(spec) is None


@pytest.mark.parametrize("release", ["0.5.15", "0.5.16", "0.5.20", "0.5.23"])
def test_the_pool_in_tokens_is_what_the_releases_own_pool_code_sizes(release: str) -> None:
    """From 0.5.14 the release's own pool sizing (its model runner's ``_resolve_memory_pool_config``,
    from 0.5.16 ``config_from_budget`` and ``resolve_max_num_reqs``) turns its budget into tokens and a
    running limit; preflight no longer warns that the pool is approximated. The EAGLE-3 draft's one
    layer of KV is inside the target's 61-layer cell."""
    spec = _pinned("eagle3-bs128", release)
    answer = executed(spec, release)
    assert answer is not None and answer.settings is not None
    settings = answer.settings
    assert settings.kv_budget_gib is not None and settings.kv_tokens is not None

    plan = plan_memory(spec)

    cell = 576 * 61 * 2
    assert settings.kv_tokens == int(settings.kv_budget_gib * 2**30) // (cell + cell // 61)
    assert (
        plan.max_total_num_tokens == settings.kv_tokens
        and plan.tokens_from == f"SGLang {release}'s own pool code"
    )
    assert plan.max_running_requests == settings.running_limit == 48  # EAGLE's default limit, as resolved
    assert "kv-pool-approximated" not in [f.code for f in run_preflight(spec, release)]


def test_a_pool_the_release_sized_in_code_not_run_here_says_why() -> None:
    """With a KV dtype the stand-in torch has no element size for (0.5.23's nvfp4, which the seeds'
    Blackwell host takes), the release's code gives the budget but does not size the pool in tokens:
    the plan has no element size of its own for fp4 either, so the pool is not judged, and the
    warning says so."""
    release, dtype = "0.5.23", "nvfp4"
    spec = _pinned("baseline", release, mem_fraction_static=0.78, extra_flags={"kv_cache_dtype": dtype})

    plan = plan_memory(spec)
    warned = [f.message for f in run_preflight(spec, release) if f.code == "memory-unjudged"]

    assert plan.pool_from == f"SGLang {release}'s own pool code" and plan.tokens_from is None
    assert plan.tokens_not_run is not None and f"--kv-cache-dtype {dtype}" in plan.tokens_not_run
    assert plan.verdict == "unknown"
    assert len(warned) == 1 and f"the plan has no element size for --kv-cache-dtype {dtype}" in warned[0]


@pytest.mark.parametrize("release", ["0.5.8", "0.5.13", "0.5.15", "0.5.23"])
@pytest.mark.parametrize(("partition", "layers"), [(None, 31), ("40,21", 40)])
def test_a_pipelines_pool_is_its_largest_stages_as_the_release_splits_the_layers(
    release: str, partition: str | None, layers: int
) -> None:
    """With --pp-size 2 each stage sizes a pool for its own layers and the stages keep the smallest:
    Kimi-K2.5's 61 layers split 30 and 31 by the release's ``get_pp_indices`` (40 and 21 with
    ``SGLANG_PP_LAYER_PARTITION``), so the pool holds the budget over 31 (40) layers' cells, about
    twice the single stage's. Judged by the release's code, the pipeline is judged (not
    ``memory-unjudged``) and the pool is not an approximation; tp 4 x pp 2 fills the 8-GPU host."""
    env = {"SGLANG_PP_LAYER_PARTITION": partition} if partition else {}
    spec = _served(
        _pinned("baseline", release, mem_fraction_static=0.85, tp_size=4, extra_flags={"pp_size": 2})
    )
    spec = spec.model_copy(
        update={"environment": spec.environment.model_copy(update={"env": {**spec.environment.env, **env}})}
    )
    answer = executed(spec, release)
    assert answer is not None and answer.settings is not None
    settings = answer.settings
    assert settings.kv_budget_gib is not None
    assert settings.kv_tokens == int(settings.kv_budget_gib * 2**30) // (576 * layers * 2)

    plan = plan_memory(spec)
    found = run_preflight(spec, release)

    assert plan.verdict == "fits" and plan.unknown_reason is None
    assert plan.tokens_from == f"SGLang {release}'s own pool code"
    assert plan.max_total_num_tokens == settings.kv_tokens
    codes = [f.code for f in found]
    assert "memory-unjudged" not in codes and "kv-pool-approximated" not in codes, codes
    assert "gpus-idle" not in codes and "tp-exceeds-gpus" not in codes


def test_a_pipeline_wider_than_the_host_is_refused_by_preflight_and_the_emulator() -> None:
    """tp 8 x pp 2 asks for 16 GPUs of an 8-GPU host: preflight refuses it, naming both sizes, and
    the emulator fails at start as SGLang does (an invalid device ordinal)."""
    spec = _pinned("baseline", "0.5.23", tp_size=8, extra_flags={"pp_size": 2})
    refused = [f for f in run_preflight(spec, "0.5.23") if f.code == "tp-exceeds-gpus"]
    assert len(refused) == 1 and refused[0].severity == "error"
    assert refused[0].message == "tp_size 8 x pp_size 2 needs 16 GPUs but the host declares 8."
    assert "at most 4" in refused[0].fix
    failure = _emulate(spec)
    assert failure is not None and "invalid device ordinal (tp_size=8 x pp_size=2" in failure


@pytest.mark.parametrize("release", ["0.5.10", "0.5.11", "0.5.13"])
def test_releases_to_0_5_13_size_the_targets_pool_before_the_draft_loads(release: str) -> None:
    """0.5.10 to 0.5.13 size the target's pool (``_resolve_memory_pool_config``) before the EAGLE-3
    draft loads: the draft's weights are still free when the pool is measured, the cell is the
    target's 61 layers alone, and the draft's KV of as many tokens follows the pool. The budget is
    the release's code's (0.5.10: what its ``profile_max_num_token`` computes, in bytes, before it
    divides by the cell), at the launch's fraction and at every other; the plan's pool and running
    limit are that code's, and preflight does not warn that they are approximated."""
    spec = _pinned("eagle3-bs128", release)
    asked, answer = question(spec, release), executed(spec, release)
    assert asked is not None and asked.memory is not None and asked.draft_weights_gib is not None
    assert answer is not None and answer.settings is not None and answer.settings.draft_after_pool
    settings, drafted = answer.settings, asked.draft_weights_gib
    free, loaded = asked.memory
    assert drafted == pytest.approx(2.4 / 8)  # the stack's draft, per GPU
    rest = loaded + drafted - free * (1 - 0.88)
    assert settings.kv_tokens == int(rest * 2**30) // (576 * 61 * 2)
    # The budget in whole bytes, as the release's code computes it before dividing by the cell.
    assert settings.kv_budget_gib == int(rest * 2**30) / 2**30
    assert len(settings.kv_budget_by_step) == 99
    for step in (1, 50, 99):
        at = loaded + drafted - free * (1 - step / 100)
        assert settings.kv_budget_by_step[step - 1] == pytest.approx(int(at * 2**30) / 2**30, abs=2**-30)

    plan = plan_memory(spec)

    assert plan.pool_from == f"SGLang {release}'s own pool code"
    assert plan.max_total_num_tokens == settings.kv_tokens
    assert plan.tokens_from == f"SGLang {release}'s own pool code"
    assert plan.max_running_requests == settings.running_limit == 48
    assert plan.draft_kv_cache_gb == pytest.approx(settings.kv_tokens * 576 * 2 / 2**30)
    assert "kv-pool-approximated" not in [f.code for f in run_preflight(spec, release)]


@pytest.mark.parametrize(
    ("release", "stack", "fraction", "running"),
    [
        ("0.5.8", "eagle3-bs128", 0.88, 48),
        ("0.5.8", "baseline", 0.78, 2048),
        ("0.5.9", "eagle3-bs128", 0.88, 48),
    ],
)
def test_releases_to_0_5_9_size_their_pool_in_their_own_init_memory_pool(
    release: str, stack: str, fraction: float, running: int
) -> None:
    """0.5.8 and 0.5.9 size the pool inside ``init_memory_pool``, which allocates it too: run up to
    where it would allocate the request pool, its ``profile_max_num_token`` gives the budget and the
    pool in tokens, measured before the EAGLE-3 draft loads (its weights still free). The running
    limit is its model runner's: EAGLE's 48, as resolved, within the request pool's slots; with none
    resolved, half the pool's tokens within the slots (2,048 at least)."""
    spec = _served(_pinned(stack, release, mem_fraction_static=fraction))
    asked, answer = question(spec, release), executed(spec, release)
    assert asked is not None and asked.memory is not None
    assert answer is not None and answer.settings is not None
    settings, (free, loaded) = answer.settings, asked.memory
    assert settings.draft_after_pool == (asked.draft_weights_gib is not None)
    rest = loaded + (asked.draft_weights_gib or 0.0) - free * (1 - fraction)
    assert settings.kv_budget_gib == pytest.approx(rest)
    assert settings.kv_tokens == int(rest * 2**30) // (576 * 61 * 2)
    assert settings.running_limit == running and settings.kv_tokens // 2 > running

    plan = plan_memory(spec)

    assert plan.pool_from == plan.tokens_from == f"SGLang {release}'s own pool code"
    assert (plan.max_total_num_tokens, plan.max_running_requests) == (settings.kv_tokens, running)


@pytest.mark.parametrize(
    ("release", "refused"),
    [
        ("0.5.8", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
        ("0.5.10", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
        ("0.5.13", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
        (
            "0.5.15",
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            "--mem-fraction-static=0.76. Raise --mem-fraction-static above 0.770",
        ),
    ],
)
def test_a_fraction_the_weights_exceed_is_refused_in_the_words_of_the_releases_pool_code(
    release: str, refused: str
) -> None:
    """At 0.76 the seeds' baseline's 72.33 GB of weights leave the KV cache nothing: 0.5.8's, 0.5.10's
    and 0.5.13's pool code finds no room for a token, 0.5.15's refuses before it sizes anything and names
    the fraction that would do; preflight and the emulator stop there in those words."""
    spec = _served(_pinned("baseline", release, mem_fraction_static=0.76))
    plan = plan_memory(spec)
    assert plan.verdict == "does_not_fit" and plan.failure_phase == "kv_pool"
    assert plan.pool_from == f"SGLang {release}'s own pool code"
    assert plan.failure is not None and plan.failure.startswith(refused)
    assert plan.smallest_fitting_fraction == 0.77
    assert [f.code for f in run_preflight(spec, release) if f.severity == "error"] == ["memory-does-not-fit"]
    failure = _emulate(spec)
    assert failure is not None and failure.startswith(refused)


def test_the_legacy_attention_dp_flags_are_attention_dp_on_a_release_with_attn_dp_size() -> None:
    """0.5.23 parses --attn-dp-size with a default of 1, and still takes --enable-dp-attention
    --dp-size 8 as attention DP over 8 ranks, as its ServerArgs resolve it."""
    argv = ["--model-path", "/m", "--tp-size", "8", "--enable-dp-attention", "--dp-size", "8"]
    for release in ("0.5.8", "0.5.23"):
        assert launch_from_argv(release, argv).attn_dp_size == 8


def _launch(spec: StackSpec) -> Launch:
    launch = stack_launch(spec, spec.environment.sglang_release)
    assert launch is not None
    return launch


def test_a_release_without_the_models_class_says_so_and_plans_by_the_rules() -> None:
    """0.5.8 has no Kimi-K2.5 model class (it arrived in 0.5.9): its code's settings for the model
    would not be a served model's, so the plan keeps the project's rules and preflight warns."""
    spec = load_stack_spec("baseline", STACKS_DIR)
    answer = executed(spec, "0.5.8")
    assert answer is not None and answer.unserved and answer.settings is None
    lacks = [f for f in run_preflight(spec, "0.5.8") if f.code == "release-lacks-model"]
    assert len(lacks) == 1 and lacks[0].key == "model.config"
    assert "Model architectures ['KimiK25ForConditionalGeneration'] are not supported" in lacks[0].message
    assert (plan_memory(spec).settings_from or "").startswith("the project's rules for SGLang 0.5.8")


def test_a_model_config_file_is_read_and_run(tmp_path: Path) -> None:
    """A model the project does not carry: its config.json file is what the release's code reads."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(public_model("llama-3.1-8b")))
    spec = load_stack_spec("baseline", STACKS_DIR)
    model = spec.model.model_copy(update={"config": str(config)})
    llama = spec.model_copy(update={"model": model})
    answer = executed(llama, "0.5.8")
    assert answer is not None and answer.settings is not None and answer.settings.executed
    assert plan_memory(llama).settings_from == "SGLang 0.5.8's own code"


@pytest.mark.parametrize(
    ("value", "said"),
    [("kimi-k3", "neither a model the project carries"), ("/nowhere/config.json", "cannot read")],
)
def test_a_model_config_that_is_not_one_is_refused_naming_the_key(value: str, said: str) -> None:
    from sglang_stacks.config.spec import load_spec

    raw = load_stack_spec("baseline", STACKS_DIR).model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["model"]["config"] = value
    with pytest.raises(SpecError) as refused:
        load_spec(raw, "typo")
    assert "model.config" in str(refused.value) and said in str(refused.value)


def test_answers_are_kept_so_a_stack_judged_once_starts_no_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept by the question, where the server listens left out: the same stack on another port (a
    test's or a fleet's free port) reads the same answer (it asked a child every time before)."""
    spec = _pinned("baseline", "0.5.23", cuda_graph_max_bs=96, port=random.randint(20000, 29999))
    first = executed(spec, "0.5.23")

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("a kept answer was asked of a child again")

    monkeypatch.setattr(release_child, "run_release_child", no_child)
    again = executed(spec, "0.5.23")
    elsewhere = executed(
        spec.model_copy(update={"server": spec.server.model_copy(update={"port": 30001})}), "0.5.23"
    )
    assert first is not None and again is not None and again.settings == first.settings
    assert elsewhere is not None and elsewhere.settings == first.settings


def test_a_campaign_asks_one_child_per_release(monkeypatch: pytest.MonkeyPatch) -> None:
    children: list[str] = []
    real = release_child.run_release_child

    def counted(module: str, *args: Any, **kwargs: Any) -> release_child.ChildRun:
        children.append(module)
        return real(module, *args, **kwargs)

    monkeypatch.setattr(release_child, "run_release_child", counted)
    # Questions no earlier run has asked, so none has a kept answer.
    fractions = [round(random.uniform(0.8, 0.9), 6) for _ in range(4)]
    specs = [_pinned("baseline", "0.5.23", mem_fraction_static=f) for f in fractions]
    specs += [_pinned("baseline", "0.5.10", mem_fraction_static=f) for f in fractions]
    execute_all((spec, spec.environment.sglang_release) for spec in specs)
    assert children == ["sglang_world._execute_child"] * 2
    assert all(executed(spec, spec.environment.sglang_release) is not None for spec in specs)
    assert len(children) == 2


def test_a_release_whose_wheel_cannot_be_had_says_which_approximation_it_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _out_of_reach(monkeypatch, tmp_path)
    spec = _pinned("baseline", "0.5.23", cuda_graph_max_bs=80)
    warned = [f for f in run_preflight(spec, "0.5.23") if f.code == "release-code-not-run"]
    assert len(warned) == 1 and "pip could not download a wheel of sglang==0.5.23" in warned[0].message
    assert "the project's rules for SGLang 0.5.23, an approximation" in warned[0].message
    assert (plan_memory(spec).settings_from or "").startswith("the project's rules for SGLang 0.5.23")


def test_without_the_releases_code_the_request_slots_follow_its_profiled_pool_not_the_capped_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """0.5.8 sizes its request table from the pool it profiled, before ``--max-total-tokens`` caps it
    and the page aligns it. Llama-3.1-8B on one GPU profiles some 600,000 tokens, which asks for
    about 2,500 slots; capped at 100,000 tokens the cap alone would ask for the floor, 2,048. Where
    the release's code cannot run, the plan's rules must give the slots its code gives: here the
    running limit, half the capped pool bounded by the slots, shows them."""
    # Its KV cell and context are the config's, not the emulator profile's (Kimi-K2.5's), when the
    # plan's rules size the pool.
    model = {"config": "llama-3.1-8b", "weights_per_gpu_gb": 16.06, "vision_num_layers": None}
    spec = _pinned(
        "baseline", "0.5.8", tp_size=1, mem_fraction_static=0.9, extra_flags={"max_total_tokens": 100_000}
    )
    spec = spec.model_copy(update={"model": spec.model.model_copy(update=model)})
    by_its_code = plan_memory(spec)
    assert by_its_code.tokens_from == "SGLang 0.5.8's own pool code"
    assert by_its_code.max_total_num_tokens == 100_000
    slots = by_its_code.max_running_requests
    assert slots is not None and 2_048 < slots < 4_096

    _out_of_reach(monkeypatch, tmp_path)
    by_its_rules = plan_memory(spec)

    assert (by_its_rules.settings_from or "").startswith("the project's rules for SGLang 0.5.8")
    assert by_its_rules.max_total_num_tokens == 100_000
    assert by_its_rules.kv_cache_gb == pytest.approx(by_its_code.kv_cache_gb)
    assert by_its_rules.max_running_requests == slots


@pytest.mark.parametrize(
    ("release", "slots"), [("0.5.8", 2_048), ("0.5.9", 2_048), ("0.5.13", 300), ("0.5.23", 300)]
)
def test_the_request_table_and_the_graphs_it_cuts_are_the_slots_the_releases_code_sizes(
    release: str, slots: int
) -> None:
    """The request table the plan charges, and the decode batch sizes captured (the release cuts them
    at the table's slots), follow the slots the release's own pool code sizes. Capped at 600 tokens,
    0.5.8 and 0.5.9 still estimate the table from the pool they profiled (the floor, 2,048 rows of
    Kimi-K2.5's context) and capture up to 512; from 0.5.10 the table has as many rows as the running
    limit, half the pool, and graphs stop at 300. The plan took 2,048 rows for every release before."""
    spec = _served(
        _pinned("baseline", release, mem_fraction_static=0.8, extra_flags={"max_total_tokens": 600})
    )
    answer = executed(spec, release)
    assert answer is not None and answer.settings is not None
    assert answer.settings.request_slots == slots

    plan = plan_memory(spec)

    assert plan.tokens_from == f"SGLang {release}'s own pool code"
    assert (plan.max_total_num_tokens, plan.max_running_requests) == (600, 300)
    context = config_context_length(spec.model.hf_config() or {})  # 0.5.8, 0.5.9: DeepSeek-V3's
    assert context in (163_840, 262_144)
    assert plan.request_table_gb == pytest.approx(slots * (context + 4) * 4 / 2**30)
    assert plan.captured_batch_sizes is not None and max(plan.captured_batch_sizes) == min(slots, 512)


def test_without_the_releases_code_the_pool_is_sized_with_the_named_configs_cell(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stack naming Llama-3.1-8B's config on the emulator host (whose profile plays Kimi-K2.5)
    declares no KV cell: where the release's code cannot run, the plan's rules size the pool with the
    config's cell (32 layers of 8 KV heads of 128, 128 KiB a token in bf16), not the profile's 61
    layers of a 576-wide latent (about half of it), so they give the pool the release's code gives,
    to the tokens the rounding of its measurements moves."""
    model = {"config": "llama-3.1-8b", "weights_per_gpu_gb": 16.06, "vision_num_layers": None}
    spec = _pinned("baseline", "0.5.8", tp_size=1, mem_fraction_static=0.9)
    spec = spec.model_copy(update={"model": spec.model.model_copy(update=model)})
    by_its_code = plan_memory(spec)
    assert by_its_code.tokens_from == "SGLang 0.5.8's own pool code"
    assert by_its_code.kv_cache_gb is not None and by_its_code.max_total_num_tokens is not None
    assert by_its_code.max_total_num_tokens == int(by_its_code.kv_cache_gb * 2**30) // (32 * 8 * 128 * 2 * 2)

    _out_of_reach(monkeypatch, tmp_path)
    by_its_rules = plan_memory(spec)

    assert (by_its_rules.settings_from or "").startswith("the project's rules for SGLang 0.5.8")
    assert by_its_rules.max_total_num_tokens == pytest.approx(by_its_code.max_total_num_tokens, abs=8)
    assert by_its_rules.max_running_requests == by_its_code.max_running_requests


@pytest.mark.parametrize(
    ("name", "cell", "context"),
    [
        ("kimi-k2.5", KvCell("mla", 61, latent_dim=576), 262_144),
        ("deepseek-v3", KvCell("mla", 61, latent_dim=576), 163_840),
        ("llama-3.1-8b", KvCell("mha", 32, kv_heads=8, head_dim=128), 131_072),
        ("qwen3-30b-a3b", KvCell("mha", 48, kv_heads=4, head_dim=128), 40_960),
    ],
)
def test_a_configs_kv_cell_and_context_are_what_its_file_says(name: str, cell: KvCell, context: int) -> None:
    """The cell the plan's rules take from a named config: a multimodal model's text config, MLA's
    latent of ``kv_lora_rank + qk_rope_head_dim``, MHA's KV heads of ``head_dim``."""
    config = public_model(name)
    assert (config_kv_cell(config), config_context_length(config)) == (cell, context)
    without = {k: v for k, v in config.items() if k != "head_dim"}  # hidden_size / heads then
    if cell.attention == "mha":
        heads = config["hidden_size"] // config["num_attention_heads"]
        assert config_kv_cell(without) == KvCell("mha", cell.layers, kv_heads=cell.kv_heads, head_dim=heads)
    assert config_kv_cell({"architectures": ["X"]}) is None


def _on_hopper(spec: StackSpec) -> StackSpec:
    hopper = {"gpu_model": "NVIDIA H200", "compute_capability": "9.0", "memory_per_gpu_mib": 143_771}
    return spec.model_copy(update={"host": spec.host.model_copy(update=hopper)})


@pytest.mark.parametrize("blackwell_first", [True, False])
def test_each_machine_is_the_releases_machine_from_its_import_on(blackwell_first: bool) -> None:
    """0.5.23 reads the GPU's SM version once and keeps it (its platform probes are cached from
    import). Its --kv-cache-dtype nvfp4 needs SM100 or SM120: on the seeds' RTX PRO 6000 (SM120) it
    resolves, on an H200 (SM90) it is refused, whichever of the two is asked first in one batch. Before,
    every machine was asked as the grid's H100 and nvfp4 was refused on Blackwell too."""
    blackwell = _pinned(
        "baseline", "0.5.23", mem_fraction_static=0.8, extra_flags={"kv_cache_dtype": "nvfp4"}
    )
    hopper = _on_hopper(blackwell)
    pairs = [(blackwell, "0.5.23"), (hopper, "0.5.23")]
    execute_all(pairs if blackwell_first else pairs[::-1])

    on_blackwell, on_hopper = executed(blackwell, "0.5.23"), executed(hopper, "0.5.23")

    assert on_blackwell is not None and on_blackwell.refusal is None and on_blackwell.not_run is None
    assert on_hopper is not None and on_hopper.refusal == (
        "RuntimeError: --kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120. "
        "Use --kv-cache-dtype=fp4_mx_block16 for the block-size-16 FP4 recipe."
    )


def test_a_hybrid_sliding_window_models_pool_is_sized_as_every_release_runner_sizes_it() -> None:
    """gpt-oss-120b alternates sliding-window and full attention layers, which SGLang pools apart (the
    sliding-window pool 0.8 of the full one, ``--swa-full-tokens-ratio``): its full pool holds
    36 / (18 + 18 x 0.8) times the tokens of one cell of all 36 layers. The runner's own layers, its
    sliding-window ones among them, and its sliding window (which 0.5.8 asserts), reach every
    release's pool code: 0.5.13's model runner and 0.5.16's and 0.5.23's ``KVCacheConfigurator`` size
    the same pool. Before, the configurator was told of no sliding window and sized 36 uniform layers,
    and 0.5.8's runner had no window, so its pool was not sized."""
    argv = ("--model-path", "/models/gpt-oss-120b", "--tp-size", "2")
    machine = Machine(143_771, 8, "NVIDIA H200", (9, 0))
    tokens = {}
    for release in ("0.5.8", "0.5.13", "0.5.16", "0.5.23"):
        launch = launch_from_argv(release, list(argv))
        device, model = DeviceFacts(total_mib=143_771), ModelFacts(weights_gib=40.0)
        asked = Question(argv, public_model("gpt-oss-120b"), machine, (), measured(launch, model, device))
        (answer,) = execute(release, [asked])
        assert answer.settings is not None and answer.settings.kv_budget_gib is not None
        tokens[release] = answer.settings.kv_tokens
        uniform = int(answer.settings.kv_budget_gib * 2**30) // (36 * 4 * 64 * 2 * 2)  # 4 KV heads a GPU
        assert tokens[release] == pytest.approx(uniform * 36 / (18 + 18 * 0.8), rel=1e-5), release
    assert tokens["0.5.13"] == tokens["0.5.16"] == tokens["0.5.23"], tokens  # one budget, one pool


def test_a_model_config_the_emulator_profile_does_not_play_is_warned_of() -> None:
    """On the emulator host the profile's model is the one served: a stack naming another model's
    config.json is judged with that config by preflight and with the profile's by the emulated
    server, and preflight says so, naming both and the fix. The shipped stacks name their profile's."""
    spec = _pinned("baseline", "0.5.23")
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"config": "llama-3.1-8b"})})
    warned = [f for f in run_preflight(spec, "0.5.23") if f.code == "model-config-not-emulated"]
    assert len(warned) == 1 and warned[0].key == "model.config"
    assert "plays kimi-k2.5" in warned[0].message and "model.config: kimi-k2.5" in warned[0].fix
    for stack in ("baseline", "k8s-fleet"):
        shipped = load_stack_spec(stack, STACKS_DIR)
        found = run_preflight(shipped, shipped.environment.sglang_release)
        assert "model-config-not-emulated" not in [f.code for f in found]


def test_an_assert_without_a_message_is_refused_with_its_statement_and_the_flag_it_reads() -> None:
    """0.5.23 asserts ``resolved_view(server_args).ep_size > 1`` for --enable-eplb, with no message:
    preflight's refusal quotes the statement and where it is in the release, as the server's
    traceback would, and names the flag it reads (server.ep_size). Before it said only
    "AssertionError: " and named no flag."""
    spec = _pinned("k8s-fleet", "0.5.23", extra_flags={"enable_eplb": True})
    refused = [f for f in run_preflight(spec, "0.5.23") if f.code == "release-refuses"]
    assert len(refused) == 1, refused
    assert refused[0].message.startswith(
        "SGLang 0.5.23 refuses this launch while resolving its arguments: AssertionError: "
        "assert resolved_view(server_args).ep_size > 1 (sglang/srt/arg_groups/parallel_hook.py:"
    )
    assert refused[0].key == "server.ep_size" and refused[0].fix.startswith(
        "Change server.ep_size as SGLang says"
    )


def test_a_model_of_linear_attention_layers_is_not_sized_as_attention_on_every_layer(tmp_path: Path) -> None:
    """Qwen3-Next keeps a KV cache on one layer in four; the others are linear attention, whose state
    SGLang pools apart, recognising the model by its own config classes. The stand-in config is none of
    them, so the release's pool code would size 48 layers of KV: it is not run, and preflight says
    why beside its warning that the pool is the plan's approximation."""
    config = {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
        "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "full_attention_interval": 4, "linear_num_value_heads": 32, "linear_num_key_heads": 16,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
        "max_position_embeddings": 262144, "vocab_size": 151936, "torch_dtype": "bfloat16",
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    model = {
        "config": str(path),
        "weights_per_gpu_gb": 80.0,
        "vision_num_layers": None,
        "vision_hidden_size": None,
    }
    spec = _pinned("baseline", "0.5.23", tp_size=2)
    spec = spec.model_copy(update={"model": spec.model.model_copy(update=model)})

    answer = executed(spec, "0.5.23")
    warned = [f.message for f in run_preflight(spec, "0.5.23") if f.code == "kv-pool-approximated"]

    assert answer is not None and answer.settings is not None and answer.settings.kv_tokens is None
    assert answer.pool_not_run is not None and "full_attention_interval" in answer.pool_not_run
    assert len(warned) == 1 and f"It was not run here: {answer.pool_not_run}." in warned[0]


@pytest.mark.parametrize("release", ["0.5.13", "0.5.20", "0.5.23"])
def test_a_pipeline_stage_of_a_hybrid_model_pools_its_own_layers(release: str) -> None:
    """At --pp-size 2 each stage of gpt-oss-120b holds half its sliding-window and full layers: a
    loaded runner narrows them to its stage (0.5.13's model runner, 0.5.20's
    adjust_hybrid_swa_layer_ids; 0.5.23 slices them in resolve_layer_indices), so the pipeline's pool
    is nearly twice one stage's of 36 layers. Before, a stage was sized with the layers another had
    left on the model config, or all of them: 0.5.20's and 0.5.23's pipeline pool was one stage's."""
    tokens = []
    for pp in (1, 2):
        argv = ("--model-path", "/models/gpt-oss-120b", "--tp-size", "2", "--pp-size", str(pp))
        launch = launch_from_argv(release, list(argv))
        measures = measured(launch, ModelFacts(weights_gib=40.0), DeviceFacts(total_mib=143_771))
        asked = Question(
            argv, public_model("gpt-oss-120b"), Machine(143_771, 8, "NVIDIA H200", (9, 0)), (), measures
        )
        (answer,) = execute(release, [asked])
        assert answer.settings is not None and answer.settings.kv_tokens is not None
        tokens.append(answer.settings.kv_tokens)
    assert 1.8 < tokens[1] / tokens[0] < 2.1, tokens
