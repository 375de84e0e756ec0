"""How a TPE search opens: the base stack's own configuration first, then one axis at a time from
the best configuration so far, passing over what preflight discards or warns is slower (and, on an
axis walked for the KV pool, what holds fewer streams than the best measured there, or more pool
than the streams need once it holds them all), the file's order of axes again once the pool holds
every stream, a lead within the margin not followed, and a resumed study opening where it stood;
then the model takes over."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from optuna.distributions import FloatDistribution, IntDistribution

from sglang_stacks.campaign.model import CampaignSpec, load_campaign
from sglang_stacks.campaign.opening import OpeningSampler, axis_points
from sglang_stacks.campaign.plan import Plan, judge, make_plan
from sglang_stacks.campaign.samplers import admitted_share
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.space import SearchSpace
from sglang_stacks.config.stackfile import read_stack_file
from sglang_stacks.results.stats import BenchmarkResult

ROOT = Path(__file__).resolve().parent.parent
STACKS = ROOT / "stacks"
POOL = "pool:\n  - {name: a, host: {kind: emulator, state_dir: /tmp/a}, port: 30001}\n"

SEEDS_TOK_S = {"512": 80.7, "256": 84.3, "128": 88.0}
"""Single-stream tok/s by CUDA-graph max batch size (the emulator's, rounded); the memory fraction
changes nothing; the custom all-reduce kernel over PCIe costs more than half."""


def _seeds_tpe() -> Plan:
    campaign = load_campaign(ROOT / "campaigns" / "seeds.yaml")
    campaign = campaign.model_copy(update={"search": campaign.search.model_copy(update={"strategy": "tpe"})})
    return make_plan("seeds", campaign, STACKS)


def _level(
    tok_s: float, concurrency: int = 1, input_len: int = 1024, repetitions: int = 5, output_len: int = 512
) -> BenchmarkResult:
    runs = [tok_s] * repetitions
    return BenchmarkResult.model_validate(
        {
            "concurrency": concurrency,
            "input_len": input_len,
            "output_len": output_len,
            "repetitions": repetitions,
            "tok_s_mean": tok_s,
            "tok_s_stdev": 0.0,
            "tok_s_ci95": [tok_s, tok_s],
            "tok_s_runs": runs,
            "requests": 2 * repetitions,
            "errors": 0,
        }
    )


def _seeds_tok_s(labels: dict[str, str], tweak: dict[str, float]) -> float:
    value = SEEDS_TOK_S[labels["server.cuda_graph_max_bs"]] + tweak.get(
        labels["server.mem_fraction_static"], 0.0
    )
    if labels["speculative"] != "off":
        value *= 0.62
    if labels["server.disable_custom_all_reduce"] == "false":
        value *= 0.44
    return value


def _step(search: Search, plan: Plan, tweak: dict[str, float]) -> tuple[str, ...]:
    """Ask for the next candidate and tell it as sweep run would (discarded, or measured)."""
    trial, candidate = search.ask()
    row = judge(plan.name, plan.campaign, candidate)
    attributes = {"stack": row.stack, "labels": candidate.labels}
    if row.verdict == "discarded":
        search.tell_infeasible(trial, row, attributes)
    else:
        search.tell_measured(trial, [_level(_seeds_tok_s(candidate.labels, tweak))], attributes)
    return tuple(candidate.labels.values())


# Labels in the seeds' axis order: CUDA-graph max bs, memory fraction, speculative, NCCL.
OPENING = [
    ("512", "auto", "off", "true"),  # the base stack itself
    ("128", "auto", "off", "true"),  # one axis at a time: 128 is better, and becomes the incumbent
    ("256", "auto", "off", "true"),
    ("128", "0.82", "off", "true"),  # the next axis, from the incumbent
    ("128", "0.88", "off", "true"),  # 0.2 tok/s ahead of the incumbent: within the margin, not followed
]
# Passed over: EAGLE-3 at the automatic fraction (preflight discards it: out of memory) and the
# custom all-reduce kernel over PCIe (preflight warns it is more than 2x slower).


def test_a_tpe_search_opens_at_the_base_stack_and_walks_one_axis_at_a_time_from_the_best() -> None:
    plan = _seeds_tpe()
    search = Search.in_memory(plan.campaign, plan.base, len(plan.kept()))
    sampler = search.study.sampler
    assert isinstance(sampler, OpeningSampler)

    walked = [_step(search, plan, {"0.88": 0.2}) for _ in OPENING]

    assert walked == OPENING
    assert [t.user_attrs.get("status") for t in search.study.trials] == ["done"] * len(OPENING)
    assert sampler.next_point(search.study.trials, search.study.direction) is None  # the model's turn
    after = [_step(search, plan, {"0.88": 0.2}) for _ in range(12)]
    assert len(set(after)) > 1  # TPE suggests on, with the opening as its history, every point included
    assert any(labels[3] == "false" or labels[2] != "off" for labels in after)


def test_a_lead_beyond_the_margin_moves_the_incumbent_and_the_next_axes_are_walked_from_it() -> None:
    plan = _seeds_tpe()
    search = Search.in_memory(plan.campaign, plan.base, len(plan.kept()))

    walked = [_step(search, plan, {"0.82": 5.0}) for _ in range(6)]

    # 0.82 is 5.7 % ahead at 128: once its axis is walked, the walk goes on from (128, 0.82); the
    # graphs axis, walked already, is not walked again.
    assert walked[3:5] == [("128", "0.82", "off", "true"), ("128", "0.88", "off", "true")]
    assert walked[5] == ("128", "0.82", "eagle3-2-4-4", "true")


def test_a_resumed_study_opens_where_it_stood(tmp_path: Path) -> None:
    plan = _seeds_tpe()
    first = Search.open(plan, tmp_path)
    done = [_step(first, plan, {}) for _ in range(3)]

    again = Search.open(plan, tmp_path)
    following = [_step(again, plan, {}) for _ in range(2)]

    assert done + following == OPENING[:5]


def _campaign(tmp_path: Path, axes: str) -> CampaignSpec:
    path = tmp_path / "opening.yaml"
    path.write_text(f"base: baseline\naxes:\n{axes}{POOL}")
    return load_campaign(path)


def _tpe_search(tmp_path: Path, axes: str) -> tuple[Search, Callable[..., float]]:
    """A TPE search over ``axes`` on ``baseline``, and the memory plan's admitted share of the base
    point with the given server flags changed (``share(mem_fraction_static="0.82")``)."""
    campaign = _campaign(tmp_path, axes)
    campaign = campaign.model_copy(update={"search": campaign.search.model_copy(update={"strategy": "tpe"})})
    plan = make_plan("opening", campaign, STACKS)
    space = SearchSpace.of(plan.campaign, plan.base)

    def share(**change: str) -> float:
        point = space.candidate(space.base_params() | {f"server.{k}": v for k, v in change.items()})
        spec = judge("opening", plan.campaign, point).spec
        assert spec is not None
        return admitted_share(spec)

    return Search.in_memory(plan.campaign, plan.base, len(plan.kept())), share


def test_the_base_stacks_point_is_its_own_value_or_the_axis_first_point(tmp_path: Path) -> None:
    campaign = _campaign(
        tmp_path,
        "  - {key: server.cuda_graph_max_bs, values: [16, 32]}\n"  # the base's 512 is not among them
        "  - {key: server.mem_fraction_static, values: [0.82, auto]}\n"  # unset in the base: auto
        "  - {key: server.max_running_requests, low: 8, high: 512}\n"  # unset: the interval's low end
        "  - {key: server.disable_custom_all_reduce, values: [false, true]}\n",
    )
    space = SearchSpace.of(campaign, read_stack_file("baseline", STACKS).sections)

    assert space.base_params() == {
        "server.cuda_graph_max_bs": "16",
        "server.mem_fraction_static": "auto",
        "server.max_running_requests": 8,
        "server.disable_custom_all_reduce": "true",
    }


def test_an_interval_is_walked_at_its_ends_and_middle() -> None:
    assert axis_points(IntDistribution(8, 512, log=True)) == [8, 64, 512]
    assert axis_points(IntDistribution(16, 256, step=16)) == [16, 144, 256]  # 136 is off its step
    assert axis_points(FloatDistribution(0.8, 0.9)) == pytest.approx([0.8, 0.85, 0.9])


LONG_PROMPTS = (
    "workload: {input_len: 4096, output_len: 512, concurrency: [64], repetitions: 3,\n"
    "           requests_per_repetition: 64}\n"
    "objective: {metric: tok_s, at: {concurrency: 64}}\n"
)
LONG_FRACTIONS = (
    "  - {key: server.cuda_graph_max_bs, values: [512, 64]}\n"
    "  - {key: server.mem_fraction_static, values: [auto, 0.84, 0.92, 0.88]}\n"
    f"{LONG_PROMPTS}"
)
"""64 streams of 4,608 tokens over the graphs' axis and the fraction's (listed second)."""


def test_when_the_kv_pool_holds_few_of_the_streams_the_opening_sees_to_the_pool_first(tmp_path: Path) -> None:
    """64 streams of 4,608 tokens: at the base's automatic fraction the memory plan's pool holds none
    of them, so the fraction (listed second) is walked first, the fraction that holds the most first;
    once it is measured the best there, the fractions that hold fewer are passed over."""
    search, share = _tpe_search(tmp_path, LONG_FRACTIONS)
    shares = {fraction: share(mem_fraction_static=fraction) for fraction in ("auto", "0.84", "0.88", "0.92")}
    assert shares["auto"] < shares["0.84"] < shares["0.88"] < shares["0.92"] < 1.0  # the plan's pool

    trial, first = search.ask()
    search.tell_measured(trial, [_level(700.0, 64, 4096, 3)], {"labels": first.labels})
    _, second = search.ask()

    assert list(first.labels.values()) == ["512", "0.92"]
    # 0.88 and 0.84 hold fewer streams than 0.92, the best measured on the fraction's axis: passed
    # over, the walk goes on to the graphs' axis from 0.92.
    assert list(second.labels.values()) == ["64", "0.92"]


def test_a_pool_point_that_was_not_measured_does_not_close_its_axis(tmp_path: Path) -> None:
    """When the fraction that holds the most streams fails to start, nothing is measured on its
    axis yet: the walk goes on to the fraction that holds the next most."""
    search, _ = _tpe_search(tmp_path, LONG_FRACTIONS)

    trial, first = search.ask()
    search.tell_failed(trial, "oom", "CUDA out of memory at load.", {"labels": first.labels})
    trial, second = search.ask()
    search.tell_measured(trial, [_level(690.0, 64, 4096, 3)], {"labels": second.labels})
    _, third = search.ask()

    assert list(first.labels.values()) == ["512", "0.92"]
    assert list(second.labels.values()) == ["512", "0.88"]
    assert list(third.labels.values()) == ["64", "0.88"]  # 0.84 holds fewer than 0.88: passed over


SHORT_PROMPTS = (
    "workload: {input_len: 256, output_len: 256, concurrency: [32], repetitions: 3,\n"
    "           requests_per_repetition: 64}\n"
    "objective: {metric: tok_s, at: {concurrency: 32}}\n"
)


def test_once_the_pool_holds_every_stream_the_opening_walks_on_in_the_files_order(tmp_path: Path) -> None:
    """32 streams of 512 tokens: at the base's automatic fraction the pool holds 6 of them, so the
    fraction is walked first; 0.82 holds them all, so the larger fractions (more pool than the
    streams need) are passed over, and with the pool no longer limiting, the axes left are walked in
    the file's order: the graphs' axis before the chunk's, though a chunk of 1,024 would also hold
    every stream at the base."""
    search, share = _tpe_search(
        tmp_path,
        "  - {key: server.cuda_graph_max_bs, values: [512, 32]}\n"
        "  - {key: server.mem_fraction_static, values: [auto, 0.82, 0.86, 0.9]}\n"
        "  - {key: server.chunked_prefill_size, values: [auto, 1024]}\n"
        f"{SHORT_PROMPTS}",
    )

    # The plan's pool: the base holds few streams; 0.82 and up, or a chunk of 1,024, hold them all.
    assert share() < share(cuda_graph_max_bs="32") < 1.0
    assert share(mem_fraction_static="0.82") == share(mem_fraction_static="0.9") == 1.0
    assert share(chunked_prefill_size="1024") == 1.0

    told: dict[tuple[str, ...], float] = {
        ("512", "auto", "auto"): 418.0,
        ("512", "0.82", "auto"): 1420.0,
        ("32", "0.82", "auto"): 1514.0,
    }
    suggested = []
    for _ in range(4):
        trial, candidate = search.ask()
        labels = tuple(candidate.labels.values())
        suggested.append(labels)
        search.tell_measured(
            trial, [_level(told.get(labels, 1400.0), 32, 256, 3, 256)], {"labels": candidate.labels}
        )

    assert suggested == [
        ("512", "auto", "auto"),  # the base stack
        ("512", "0.82", "auto"),  # the fraction that holds the most streams, first in the file's order
        ("32", "0.82", "auto"),  # 0.86 and 0.9 passed over; the file's order again: the graphs
        ("32", "0.82", "1024"),  # then the chunk, from the new incumbent
    ]
