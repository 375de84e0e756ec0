"""The load generator's document, summarised: one ``BenchmarkResult`` per load level (a
concurrency, or a request rate), with goodput under a declared ``Slo`` and the cost per million
output tokens."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

from sglang_loadgen.contract import Workload
from sglang_loadgen.document import SCHEMA, Document, Level, Record
from sglang_stacks.errors import BenchmarkError
from sglang_stacks.results.stats import (
    BenchmarkResult,
    Goodput,
    Percentiles,
    Slo,
    ci95,
    mean,
    stdev,
    tok_s_figure,
)

__all__ = ["cost_per_mtok", "goodput", "pooled", "read_document", "summarize_levels"]


@cache
def _document() -> TypeAdapter[Document]:
    return TypeAdapter(Document)


def read_document(loadgen_json: Document | Mapping[str, Any] | str) -> Document:
    """The load generator's document, read back into the types it was written with; BenchmarkError
    naming the first part that is not usable."""
    if isinstance(loadgen_json, Document):
        return loadgen_json
    fix = "Re-run the benchmark with the load generator shipped with this version of sglang-stacks."
    try:
        raw = json.loads(loadgen_json) if isinstance(loadgen_json, str) else dict(loadgen_json)
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"The load generator printed no JSON document ({exc}). {fix}") from exc
    schema = raw.get("schema") if isinstance(raw, dict) else None
    if schema != SCHEMA:
        raise BenchmarkError(f"The load generator's output has schema {schema!r}, expected {SCHEMA!r}. {fix}")
    try:
        return _document().validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BenchmarkError(
            f"The load generator's output is not usable at {where!r}: {first['msg']}. {fix}"
        ) from exc


def goodput(level: Level, slo: Slo) -> Goodput:
    """Per repetition, the requests within ``slo`` over its duration, and their share of its tokens
    times its tok/s; the mean over repetitions. Taking the tok/s as a share keeps goodput at or below
    the throughput it is part of, whatever the rounding of the repetition's duration."""
    req_s, tok_s = [], []
    met = 0
    for rep, totals in enumerate(level.repetitions):
        within = [r for r in level.records if r.repetition == rep and slo.met(r.ttft_ms, r.tpot_ms, r.e2e_ms)]
        met += len(within)
        req_s.append(len(within) / totals.duration_s if totals.duration_s > 0 else 0.0)
        tokens = sum(r.completion_tokens for r in within)
        share = tokens / totals.completion_tokens if totals.completion_tokens else 0.0
        tok_s.append(totals.tok_s * share)
    limits = {k: v for k, v in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms), ("e2e_ms", slo.e2e_ms))}
    return Goodput(
        req_s=round(mean(req_s), 4),
        tok_s=tok_s_figure(mean(tok_s)),
        pct=round(100.0 * met / level.requests, 2) if level.requests else 0.0,
        slo={k: v for k, v in limits.items() if v is not None},
    )


def cost_per_mtok(host_price_per_hour: float | None, tok_s: float) -> float | None:
    """What a million output tokens cost at ``tok_s`` on a host of that hourly price; None without one."""
    if not host_price_per_hour or tok_s <= 0:
        return None
    return round(host_price_per_hour / 3600.0 / tok_s * 1e6, 4)


def _most_in_flight(level: Level) -> int:
    """The most requests in flight at once in any repetition (open loop's concurrency)."""
    most = 1
    for rep in range(len(level.repetitions)):
        events = sorted(
            (t, step)
            for r in level.records
            if r.repetition == rep
            for t, step in ((r.sent_s, 1), (r.sent_s + r.e2e_ms / 1000.0, -1))
        )
        running = 0
        for _, step in events:
            running += step
            most = max(most, running)
    return most


def _result(
    level: Level, workload: Workload, slo: Slo | None, gpu_hour_price: float | None
) -> BenchmarkResult:
    runs = level.tok_s_runs
    low, high = ci95(runs)
    accept = None
    if level.spec_verify_ct > 0:
        accept = round(level.spec_completion_tokens / level.spec_verify_ct, 4)
    tok_s = mean(runs)
    records = level.records
    return BenchmarkResult(
        concurrency=level.concurrency or _most_in_flight(level),
        request_rate=level.request_rate,
        input_len=max(1, round(level.prompt_tokens_mean)) if level.prompt_tokens_mean else workload.input_len,
        output_len=workload.output_len,
        repetitions=len(runs),
        tok_s_mean=tok_s_figure(tok_s),
        tok_s_stdev=tok_s_figure(stdev(runs)),
        tok_s_ci95=(tok_s_figure(low), tok_s_figure(high)),
        tok_s_runs=tuple(tok_s_figure(run) for run in runs),
        ttft_ms=Percentiles.of([r.ttft_ms for r in records]),
        tpot_ms=Percentiles.of([r.tpot_ms for r in records if r.tpot_ms is not None]),
        itl_ms=Percentiles.of(level.itl_ms),
        e2e_ms=Percentiles.of([r.e2e_ms for r in records]),
        concurrency_measured=round(mean([r.concurrency_measured for r in level.repetitions]), 3),
        goodput=goodput(level, slo) if slo is not None else None,
        cost_per_mtok=cost_per_mtok(gpu_hour_price, tok_s),
        accept_length=accept,
        requests=level.requests,
        errors=level.errors,
    )


def summarize_levels(
    loadgen_json: Document | Mapping[str, Any] | str,
    slo: Slo | None = None,
    gpu_hour_price: float | None = None,
) -> tuple[BenchmarkResult, ...]:
    """One ``BenchmarkResult`` per load level of a load generator run, in run order.

    ``slo`` adds goodput; ``gpu_hour_price`` (what the whole host costs per hour) adds the cost
    of a million output tokens.
    """
    document = read_document(loadgen_json)
    return tuple(_result(level, document.workload, slo, gpu_hour_price) for level in document.levels)


def _weighted(values: Sequence[tuple[float, int]]) -> float:
    weight = sum(count for _, count in values)
    return sum(value * count for value, count in values) / weight if weight else 0.0


def pooled(levels: Sequence[Level]) -> Level:
    """Several runs of one load level as one: their repetitions, requests, records and gaps
    together, as if one run had made them all (a gate that measured again judges them pooled)."""
    if not levels:
        raise ValueError("nothing to pool")
    first = levels[0]
    if len(levels) == 1:
        return first
    kinds: Counter[str] = Counter()
    records: list[Record] = []
    before = 0  # repetitions of the runs before: a record names its repetition, counted from the first run's
    for level in levels:
        kinds.update(level.error_kinds)
        records.extend(record._replace(repetition=record.repetition + before) for record in level.records)
        before += len(level.repetitions)
    return dataclasses.replace(
        first,
        repetitions=[repetition for level in levels for repetition in level.repetitions],
        requests=sum(level.requests for level in levels),
        errors=sum(level.errors for level in levels),
        error_samples=list(dict.fromkeys(sample for level in levels for sample in level.error_samples))[:5],
        warmup_errors=sum(level.warmup_errors for level in levels),
        prompt_tokens_mean=_weighted([(level.prompt_tokens_mean, len(level.records)) for level in levels]),
        completion_tokens=sum(level.completion_tokens for level in levels),
        spec_completion_tokens=sum(level.spec_completion_tokens for level in levels),
        spec_verify_ct=sum(level.spec_verify_ct for level in levels),
        records=records,
        itl_count=sum(level.itl_count for level in levels),
        itl_bunched_pct=_weighted([(level.itl_bunched_pct, level.itl_count) for level in levels]),
        itl_ms=[gap for level in levels for gap in level.itl_ms],
        error_kinds=dict(kinds),
    )
