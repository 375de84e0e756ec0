"""The batching engine: seeded output, speculative chunks, prefix cache and flush refusal."""

from __future__ import annotations

import logging
import time

from sglang_emulator.engine import Chunk, Engine, Request
from sglang_emulator.launch import parse_launch_flags, resolve_launch
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.pool_limits import PoolLimits
from sglang_emulator.profile_loading import load_profile
from sglang_world.scheduling import scheduling_rules

EAGLE = "--speculative-algorithm EAGLE --speculative-draft-model-path /d --speculative-num-steps 2"
EAGLE_TREE = "--speculative-eagle-topk 4 --speculative-num-draft-tokens 4"


def model_for(flags: str) -> PerformanceModel:
    profile = load_profile()
    config = resolve_launch(
        "0.5.8", parse_launch_flags("0.5.8", f"--model m --tp 8 {flags}".split()), profile
    )
    return PerformanceModel(config, profile)


def make_engine(flags: str, seed: int = 1) -> Engine:
    model = model_for(flags)
    limits = PoolLimits(100_000, 48, 8192, 16384, model.config.context_length)
    engine = Engine(
        model,
        limits,
        scheduling_rules("0.5.8"),
        seed,
        logging.getLogger("test-engine"),
    )
    engine.start()
    return engine


def run(engine: Engine, prompt: list[int], tokens: int) -> tuple[Request, list[Chunk]]:
    request = Request(rid="r", prompt_ids=prompt, max_new_tokens=tokens)
    engine.submit(request)
    chunks = [request.chunks.get(timeout=10)]
    while not chunks[-1].finished:
        chunks.append(request.chunks.get(timeout=10))
    return request, chunks


def test_same_seed_same_text_other_seed_other_text() -> None:
    texts = []
    for seed in (7, 7, 8):
        engine = make_engine("--disable-custom-all-reduce", seed)
        texts.append(run(engine, [1, 2, 3], 6)[0].output_text)
        engine.stop()
    assert texts[0] == texts[1] != texts[2]


def test_speculative_chunks_are_seeded_accept_lengths() -> None:
    lengths = []
    for _ in range(2):
        engine = make_engine(f"--disable-custom-all-reduce {EAGLE} {EAGLE_TREE}", seed=3)
        request, chunks = run(engine, [1], 30)
        engine.stop()
        lengths.append([len(c.new_token_ids) for c in chunks])
        assert request.spec_verify_ct == len(chunks) - 1  # the first token comes from prefill
    assert lengths[0] == lengths[1]
    assert max(lengths[0]) <= 3 and sum(lengths[0]) == 30


def test_prefix_cache_and_flush() -> None:
    engine = make_engine("--disable-custom-all-reduce")
    run(engine, [5] * 20, 1)
    request, _ = run(engine, [5] * 20 + [6], 1)
    assert request.cached_tokens == 20
    pending = Request(rid="p", prompt_ids=[9], max_new_tokens=30)
    engine.submit(pending)
    assert engine.flush_cache() is False
    while not pending.chunks.get(timeout=10).finished:
        pass
    assert engine.flush_cache() is True
    request, _ = run(engine, [5] * 20, 1)
    assert request.cached_tokens == 0
    engine.stop()


def test_an_idle_scheduler_prefills_from_the_requests_arrival_not_from_its_own_wake_up() -> None:
    """A request that reached the server 0.4 s ago (its handler was slow to hand it over) has been
    due since 0.05 s ago: its first token is emitted at once, not a whole prefill (0.35 s) after
    the scheduler noticed it. The server counts its latency from the arrival."""
    engine = make_engine("--disable-custom-all-reduce")
    run(engine, [1, 2, 3], 2)
    prompt = list(range(1, 4097))
    prefill_s = model_for("--disable-custom-all-reduce").prefill_ms(len(prompt)) / 1000
    assert prefill_s > 0.3
    time.sleep(prefill_s + 0.1)  # idle since well before the request arrived
    arrived = time.monotonic() - (prefill_s + 0.05)
    request = Request(rid="late", prompt_ids=prompt, max_new_tokens=1, created_s=arrived)
    handed_over = time.monotonic()
    engine.submit(request)
    assert request.chunks.get(timeout=10).finished
    engine.stop()
    assert request.first_token_s is not None
    assert request.first_token_s - handed_over < prefill_s / 2


def test_a_request_joins_the_first_step_that_begins_after_it_arrived_whenever_the_scheduler_sees_it() -> None:
    """Two prompts handed over together, the second arriving 30 ms after the first: the idle GPU
    starts on the first when it arrives, and the second, which came during that prefill, waits for
    the next one (as the replayed model has it), though the scheduler held both when it began."""
    engine = make_engine("--disable-custom-all-reduce")
    run(engine, [1, 2, 3], 2)
    time.sleep(0.3)  # idle since well before both
    arrived = time.monotonic()
    first = Request(rid="first", prompt_ids=list(range(1, 2049)), max_new_tokens=1, created_s=arrived)
    later = Request(
        rid="later", prompt_ids=list(range(5000, 7048)), max_new_tokens=1, created_s=arrived + 0.03
    )
    engine.submit(first)
    engine.submit(later)
    for request in (first, later):
        assert request.chunks.get(timeout=10).finished
    engine.stop()
    assert first.first_token_s is not None and later.first_token_s is not None
    prefill_s = model_for("--disable-custom-all-reduce").prefill_ms(2048) / 1000
    assert later.first_token_s - first.first_token_s >= 0.9 * prefill_s
