"""The truth the load generator's tok/s is measured against, and the comparison of a level with it.

The truth is the emulator's own scheduler replayed in virtual time: ``replay`` steps
``sglang_emulator.virtual.VirtualEngine`` for the same launch, profile and pool over what the load
generator really sent over the whole run, warmups included: each request's send time and length.
A level's repetitions are then compared with their replay, and with the emulator's own tok/s (each
request's send time plus the latency the emulator itself reports for it).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from sglang_emulator.engine import Request
from sglang_emulator.virtual import VirtualEngine
from sglang_loadgen.streaming import RequestRecord

__all__ = ["Replayed", "compare_level", "percentile", "replay", "replay_run"]


@dataclass
class Replayed:
    """One request in the replay: when it arrived, its lengths, and what the scheduler did."""

    arrived_s: float
    input_len: int
    output_len: int
    first_token_s: float = 0.0
    finished_s: float = 0.0


def replay(engine: VirtualEngine, requests: list[Replayed]) -> None:
    """Fill in each request's first-token and finish times as the emulator's scheduler produces
    them for these arrivals, in virtual time, after the server's own warmup request."""
    engine.submit(Request(rid="warmup", prompt_ids=[1, 2, 3, 4, 5, 6], max_new_tokens=8))
    engine.advance()
    start = engine.now_s
    sent: list[tuple[Replayed, Request]] = []
    for number, replayed in enumerate(sorted(requests, key=lambda r: r.arrived_s)):
        engine.advance(until_s=start + replayed.arrived_s)
        # Fresh prompts, as the load generator's: no prefix shared with another request.
        prompt = [number * 7919 + 1, *range(2, replayed.input_len + 1)]
        request = Request(rid=str(number), prompt_ids=prompt, max_new_tokens=replayed.output_len)
        engine.submit(request)
        sent.append((replayed, request))
    engine.advance()
    for replayed, request in sent:
        assert request.first_token_s is not None and request.finished_s is not None
        replayed.first_token_s = request.first_token_s - start
        replayed.finished_s = request.finished_s - start


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def replay_run(engine: VirtualEngine, sent: list[list[RequestRecord]]) -> dict[int, Replayed]:
    """The replay of every request the run sent (``sent``: its batches, warmups included), by its
    record."""
    records = [r for batch in sent for r in batch]
    start = min(r.sent_s for r in records)
    replayed = {id(r): Replayed(r.sent_s - start, r.prompt_tokens, r.completion_tokens) for r in records}
    replay(engine, list(replayed.values()))
    return replayed


def compare_level(
    tok_s_runs: list[float],
    reps: list[list[RequestRecord]],
    truth: dict[int, Replayed],
    server_e2e_s: dict[int, float],
) -> dict[str, float]:
    """The level's tok/s, TTFT and E2E against the replay of every repetition's sent requests, and
    the emulator's own tok/s (each request's send time plus the server's latency of it, from
    ``server_e2e_s``)."""
    errors, truths, served, against_server = [], [], [], []
    ttft: dict[str, list[float]] = {"loadgen": [], "truth": []}
    e2e: dict[str, list[float]] = {"loadgen": [], "emulator": [], "truth": []}
    for measured, records in zip(tok_s_runs, reps, strict=True):
        start = min(r.sent_s for r in records)
        requests = [truth[id(r)] for r in records]
        first = min(r.arrived_s for r in requests)
        tokens = sum(r.completion_tokens for r in records)
        truth_tok_s = tokens / (max(r.finished_s for r in requests) - first)
        server_s = [server_e2e_s[id(r)] for r in records]
        emulator = tokens / max(r.sent_s - start + s for r, s in zip(records, server_s, strict=True))
        truths.append(truth_tok_s)
        served.append(emulator)
        errors.append(100.0 * (measured - truth_tok_s) / truth_tok_s)
        against_server.append(100.0 * (measured - emulator) / emulator)
        ttft["loadgen"] += [1000 * (r.ttft_s or 0.0) for r in records]
        ttft["truth"] += [1000 * (r.first_token_s - r.arrived_s) for r in requests]
        e2e["loadgen"] += [1000 * r.latency_s for r in records]
        e2e["emulator"] += [1000 * s for s in server_s]
        e2e["truth"] += [1000 * (r.finished_s - r.arrived_s) for r in requests]
    return {
        "loadgen_tok_s": statistics.fmean(tok_s_runs),
        "truth_tok_s": statistics.fmean(truths),
        "error_pct": statistics.fmean(errors),
        "worst_error_pct": max(errors, key=abs),
        "emulator_tok_s": statistics.fmean(served),
        "error_vs_emulator_pct": statistics.fmean(against_server),
        "ttft_p50_ms_loadgen": percentile(ttft["loadgen"], 50),
        "ttft_p50_ms_truth": percentile(ttft["truth"], 50),
        **{f"e2e_ms_{who}": statistics.fmean(values) for who, values in e2e.items()},
    }
