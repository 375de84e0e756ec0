"""The emulator's scheduler bounded by its KV pool as SGLang's is: admission with the decode
reservation, chunked prefill, the prefill budget, retraction when decode runs out, and what that
does to throughput; in virtual time (the served engine's loop, stepped without sleeping)."""

from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sglang_emulator.engine import Request
from sglang_emulator.launch import LaunchConfig, parse_launch_flags, resolve_launch
from sglang_emulator.memory import plan_memory
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.pool_limits import PoolLimits, pool_limits
from sglang_emulator.profile_loading import load_profile
from sglang_emulator.virtual import VirtualEngine
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_world.scheduling import scheduling_rules

ROOT = Path(__file__).resolve().parent.parent
BASE = [
    "--model",
    "/shared/kimi-k2.5-int4",
    "--tp",
    "8",
    "--cuda-graph-max-bs",
    "128",
    "--disable-custom-all-reduce",
]
USAGE = re.compile(r"token usage: ([0-9.]+)")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def launch(*flags: str) -> LaunchConfig:
    return resolve_launch("0.5.8", parse_launch_flags("0.5.8", [*BASE, *flags]), load_profile())


@dataclass
class Run:
    """A closed loop of ``streams`` clients on a virtual engine, with its log."""

    engine: VirtualEngine
    log: _Lines
    requests: list[Request] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return sum(r.completion_tokens for r in self.requests) / self.engine.now_s

    def matching(self, text: str) -> list[str]:
        return [line for line in self.log.lines if text in line]

    def prefill_tokens(self) -> list[int]:
        """Each prefill batch's new tokens, as its log line says."""
        return [
            int(n) for line in self.matching("Prefill batch") for n in re.findall(r"#new-token: (\d+)", line)
        ]


def closed_loop(
    config: LaunchConfig,
    streams: int,
    total: int,
    input_len: int,
    output_len: int,
    limits: PoolLimits | None = None,
) -> Run:
    profile = load_profile()
    logger = logging.getLogger(f"test-batching-{id(config)}-{streams}-{total}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    lines = _Lines()
    logger.addHandler(lines)
    limits = limits or pool_limits(config, plan_memory(config, profile))
    requests: list[Request] = []

    def send() -> None:
        number = len(requests)
        # Fresh prompts, as the load generator's: no prefix shared with another request.
        prompt = [number * 7919 + 1, *range(2, input_len + 1)]
        requests.append(Request(rid=str(number), prompt_ids=prompt, max_new_tokens=output_len))
        engine.submit(requests[-1])

    def done(request: Request) -> None:
        if len(requests) < total:
            send()

    rules = scheduling_rules("0.5.8", {})
    engine = VirtualEngine(PerformanceModel(config, profile), limits, rules, 1, done, logger)
    run = Run(engine, lines, requests)
    for _ in range(min(streams, total)):
        send()
    run.engine.advance()
    return run


def test_a_pool_too_small_for_the_batch_queues_the_rest_instead_of_serving_it() -> None:
    """2,985 tokens (fraction 0.7713) and 32 streams of 256 + 256: five requests fit at a time
    (each needs its prompt and a reservation for all its output), the others queue; before, all 32
    ran and the log said token usage 5.35."""
    run = closed_loop(
        launch("--mem-fraction-static", "0.7713"), streams=32, total=32, input_len=256, output_len=256
    )
    assert run.engine.limits.max_total_num_tokens == 2985
    running = [int(n) for line in run.log.lines for n in re.findall(r"#running-req: (\d+)", line)]
    assert max(running) == 5
    assert max(int(n) for line in run.log.lines for n in re.findall(r"#queue-req: (\d+)", line)) == 27
    assert all(r.completion_tokens == 256 for r in run.requests)
    assert max(float(u) for line in run.log.lines for u in USAGE.findall(line)) <= 1.0
    # Five at a time is a fifth of what 32 at a time would serve, and no more than the pool allows.
    roomy = closed_loop(
        launch("--mem-fraction-static", "0.88"), streams=32, total=32, input_len=256, output_len=256
    )
    assert run.tok_s < roomy.tok_s / 3


def test_decode_that_outgrows_the_pool_retracts_requests_as_sglang_logs_it() -> None:
    """68,658 tokens (0.82) and 64 streams of 1024 + 512: admission reserves only new_token_ratio of
    the running requests' remaining tokens, the ratio decays with every decode batch, so more are
    admitted than can finish; when a decode step finds no free token the requests with the least
    output go back to the queue, the ratio is raised, and every request still gets all its tokens."""
    run = closed_loop(
        launch("--mem-fraction-static", "0.82"), streams=64, total=128, input_len=1024, output_len=512
    )
    retractions = run.matching("KV cache pool is full. Retract requests.")
    assert retractions, run.log.lines[:40]
    said = re.compile(
        r"KV cache pool is full\. Retract requests\. #retracted_reqs: (\d+), #new_tokens_gained: (\d+), "
        r"#new_token_ratio: ([0-9.]+) -> ([0-9.]+)"
    )
    parsed = [said.fullmatch(line) for line in retractions]
    assert all(parsed), retractions
    counts = [(int(p[1]), float(p[3]), float(p[4])) for p in parsed if p]
    assert sum(n for n, _, _ in counts) == run.engine.stats.retracted_requests_total
    assert all(after > before for _, before, after in counts)  # the ratio is raised
    assert max(float(u) for line in run.log.lines for u in USAGE.findall(line)) <= 1.0
    assert all(r.completion_tokens == 512 for r in run.requests)
    # Between two retractions the ratio decays (one step per decode batch), and once the server has
    # nothing left to run it starts over.
    assert all(later[1] < earlier[2] for earlier, later in itertools.pairwise(counts))
    ratio = run.engine.scheduler.ratio
    assert ratio.current == ratio.init


def test_tok_s_at_32_streams_grows_with_the_memory_fraction_until_the_pool_stops_binding() -> None:
    """The same launch at growing memory fractions, 32 streams of 1024 + 512: a larger KV pool
    admits more requests at a time, until all 32 fit."""
    tok_s = {
        fraction: closed_loop(
            launch("--mem-fraction-static", fraction), streams=32, total=64, input_len=1024, output_len=512
        ).tok_s
        for fraction in ("0.775", "0.78", "0.79", "0.81", "0.88")
    }
    binding = [tok_s[f] for f in ("0.775", "0.78", "0.79", "0.81")]
    assert binding == sorted(binding) and len(set(binding)) == 4, tok_s
    assert tok_s["0.81"] == pytest.approx(tok_s["0.88"], rel=1e-9)  # all 32 fit from 0.81 on


def test_a_long_prompt_is_prefilled_one_chunk_per_batch_and_its_first_token_comes_with_the_last() -> None:
    config = launch("--mem-fraction-static", "0.88")
    run = closed_loop(config, streams=1, total=1, input_len=20_000, output_len=4)
    assert run.prefill_tokens() == [8192, 8192, 3616]
    model = PerformanceModel(config, load_profile())
    request = run.requests[0]
    assert request.first_token_s == pytest.approx(sum(model.prefill_ms(n) for n in (8192, 8192, 3616)) / 1000)
    unchunked = closed_loop(
        launch("--mem-fraction-static", "0.88", "--chunked-prefill-size", "-1"),
        streams=1, total=1, input_len=20_000, output_len=4,
    )  # fmt: skip
    assert unchunked.prefill_tokens() == [20_000]


def test_a_prefill_batch_holds_no_more_new_tokens_than_max_prefill_tokens() -> None:
    config = launch(
        "--mem-fraction-static", "0.88", "--chunked-prefill-size", "-1", "--max-prefill-tokens", "4096"
    )
    run = closed_loop(config, streams=16, total=16, input_len=1024, output_len=4)
    batches = run.prefill_tokens()
    # SGLang stops a batch once the next prompt would reach the budget: three of 1,024 under 4,096.
    assert batches == [3072] * 5 + [1024]


def test_the_running_limit_holds_whatever_the_pool() -> None:
    config = launch("--mem-fraction-static", "0.88")
    limits = pool_limits(config, plan_memory(config, load_profile()))
    small = PoolLimits(limits.max_total_num_tokens, 4, 8192, 16384, config.context_length)
    run = closed_loop(config, streams=10, total=10, input_len=256, output_len=50, limits=small)
    running = [int(n) for line in run.log.lines for n in re.findall(r"#running-req: (\d+)", line)]
    assert max(running) == 4
    assert all(r.completion_tokens == 50 for r in run.requests)


@pytest.mark.parametrize(
    ("stack", "campaign_tok_s"),
    [("baseline", 82.0), ("baseline-bs128", 89.5), ("eagle3-bs512", 53.0), ("eagle3-bs128", 54.1)],
)
def test_the_seeds_single_stream_decode_is_unchanged(stack: str, campaign_tok_s: float) -> None:
    """The campaign's table, decoded by the pool-bounded scheduler from each seed stack's own launch
    (as rendered for ``pulumi up``): one request of 1024 + 512 decodes at the campaign's speed."""
    spec = load_stack_spec(stack, ROOT / "stacks")
    argv = render_argv(spec.launch_flags(), "0.5.8")
    config = resolve_launch("0.5.8", parse_launch_flags("0.5.8", argv), load_profile())
    request = closed_loop(config, streams=1, total=1, input_len=1024, output_len=512).requests[0]
    assert request.first_token_s is not None and request.finished_s is not None
    decode_tok_s = (request.completion_tokens - 1) / (request.finished_s - request.first_token_s)
    assert decode_tok_s == pytest.approx(campaign_tok_s, rel=0.03)
    model_tok_s = PerformanceModel(config, load_profile()).single_stream_tok_s()
    assert decode_tok_s == pytest.approx(model_tok_s, rel=0.01 if config.speculative else 1e-6)
