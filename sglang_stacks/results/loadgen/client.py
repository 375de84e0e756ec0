"""The load generator's client: streams SGLang's ``/generate`` and measures tok/s, TTFT, TPOT,
ITL and accept length, at each concurrency level of a ``Workload``, into one JSON document.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass, field, fields
from typing import Any

import httpx

from .contract import SCHEMA, LoadgenError, Workload, parse_args

__all__ = ["ITL_SAMPLE_LIMIT", "main", "run", "run_async"]

ITL_SAMPLE_LIMIT = 20_000
"""Above this many inter-token gaps per level, ``itl_ms`` keeps a rank sample so the output stays small."""

# Common one-token English words: a prompt of N of them is about N tokens for most tokenizers,
# and a per-request seed keeps prompts distinct so the prefix cache cannot skip the prefill.
_WORDS = tuple(
    " ".join(
        (
            "the of and to in is was for on are with as his they be at one have this from",
            "or had by word but what some we can out other were all there when up use your how",
            "said an each she which do their time if will way about many then them write would",
        )
    ).split()
)


@dataclass
class RequestRecord:
    """What one streamed request measured; times are seconds from its own send."""

    sent_s: float = 0.0
    finished_s: float = 0.0
    ttft_s: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    spec_verify_ct: int | None = None
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def latency_s(self) -> float:
        return self.finished_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.completion_tokens - 1)


def make_prompt(input_len: int, seed: int) -> str:
    """About ``input_len`` tokens of text, different for each ``seed``."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(input_len))


def _tokens_so_far(chunk: dict[str, Any], previous: int) -> int:
    """Cumulative completion tokens after ``chunk``; falls back to ``output_ids``, then to one per chunk."""
    meta = chunk.get("meta_info") or {}
    if isinstance(meta.get("completion_tokens"), int):
        return int(meta["completion_tokens"])
    if isinstance(chunk.get("output_ids"), list):
        return len(chunk["output_ids"])
    return previous + 1 if chunk.get("text") else previous


async def stream_one(client: httpx.AsyncClient, workload: Workload, seed: int) -> RequestRecord:
    """Send one streaming ``/generate`` request and time every chunk it returns."""
    body = {
        "text": make_prompt(workload.input_len, seed),
        "sampling_params": {
            "max_new_tokens": workload.output_len,
            "temperature": 0,
            "ignore_eos": workload.ignore_eos,
        },
        "stream": True,
    }
    record = RequestRecord(sent_s=time.perf_counter())
    last_token_s = record.sent_s
    try:
        async with client.stream(
            "POST", "/generate", json=body, timeout=workload.request_timeout_s
        ) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")[:200]
                record.error = f"HTTP {response.status_code}: {text}"
                return record
            async for line in response.aiter_lines():
                now = time.perf_counter()
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    record.error = f"server error: {json.dumps(chunk['error'])[:200]}"
                    return record
                tokens = _tokens_so_far(chunk, record.completion_tokens)
                arrived = tokens - record.completion_tokens
                if arrived > 0:
                    if record.ttft_s is None:
                        record.ttft_s = now - record.sent_s
                    else:
                        # A speculative chunk of k tokens counts as k gaps of gap/k.
                        record.itl_s.extend([(now - last_token_s) / arrived] * arrived)
                    last_token_s = now
                    record.completion_tokens = tokens
                meta = chunk.get("meta_info") or {}
                record.prompt_tokens = int(meta.get("prompt_tokens") or record.prompt_tokens)
                if meta.get("spec_verify_ct") is not None:
                    record.spec_verify_ct = int(meta["spec_verify_ct"])
                finish = meta.get("finish_reason")
                if isinstance(finish, dict) and finish.get("type") == "abort":
                    record.error = f"aborted by the server: {json.dumps(finish)[:200]}"
                    return record
    except (httpx.HTTPError, json.JSONDecodeError, ValueError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"[:200]
        return record
    finally:
        record.finished_s = time.perf_counter()
    if record.completion_tokens == 0:
        record.error = "the stream ended without any completion tokens"
    return record


async def _stream_requests(
    client: httpx.AsyncClient, workload: Workload, streams: int, total: int, seed_base: int
) -> list[RequestRecord]:
    """``total`` requests over ``streams`` closed-loop streams: each sends its next one when one ends."""
    seeds = iter(range(seed_base, seed_base + total))
    records: list[RequestRecord] = []

    async def one_stream() -> None:
        # One event loop thread: taking the next seed needs no lock.
        for seed in seeds:
            records.append(await stream_one(client, workload, seed))

    await asyncio.gather(*(one_stream() for _ in range(min(streams, total))))
    return records


def _repetition(records: list[RequestRecord]) -> dict[str, Any]:
    good = [r for r in records if r.error is None]
    started = min(r.sent_s for r in records)
    finished = max(r.finished_s for r in records)
    duration_s = finished - started
    tokens = sum(r.completion_tokens for r in good)
    return {
        "tok_s": tokens / duration_s if duration_s > 0 else 0.0,
        "duration_s": round(duration_s, 6),
        "completion_tokens": tokens,
        "requests": len(records),
        "errors": len(records) - len(good),
    }


def _ms(value_s: float) -> float:
    return round(value_s * 1000.0, 3)


def _rank_sample(values: list[float], limit: int) -> list[float]:
    """At most ``limit`` values at even ranks of the sorted list: percentiles survive, size is bounded."""
    if len(values) <= limit:
        return values
    ordered = sorted(values)
    return [ordered[round(i * (len(ordered) - 1) / (limit - 1))] for i in range(limit)]


async def run_level(client: httpx.AsyncClient, workload: Workload, concurrency: int) -> dict[str, Any]:
    """Warm up, then run every repetition at one concurrency level; one JSON-ready dict."""
    seed = concurrency * 1_000_000
    warm = []
    if workload.warmup_requests:
        warm = await _stream_requests(client, workload, concurrency, workload.warmup_requests, seed)
    repetitions: list[dict[str, Any]] = []
    measured: list[RequestRecord] = []
    for rep in range(workload.repetitions):
        records = await _stream_requests(
            client, workload, concurrency, workload.requests_per_repetition, seed + (rep + 1) * 10_000
        )
        repetitions.append(_repetition(records))
        measured.extend(records)
    good = [r for r in measured if r.error is None]
    if not good:
        first = next((r.error for r in measured if r.error), "no request was sent")
        raise LoadgenError(
            f"All {len(measured)} requests at concurrency {concurrency} failed; the first error was: "
            f"{first}. Check that the server at {workload.url} is ready (GET /health) and serves /generate."
        )
    errors = [r.error for r in measured if r.error is not None]
    verify = [r for r in good if r.spec_verify_ct]
    return {
        "concurrency": concurrency,
        "tok_s_runs": [round(r["tok_s"], 4) for r in repetitions],
        "repetitions": repetitions,
        "requests": len(measured),
        "errors": len(errors),
        "error_samples": sorted(set(errors))[:5],
        "warmup_errors": sum(1 for r in warm if r.error is not None),
        "prompt_tokens_mean": round(sum(r.prompt_tokens for r in good) / len(good), 2),
        "completion_tokens": sum(r.completion_tokens for r in good),
        "spec_completion_tokens": sum(r.completion_tokens for r in verify),
        "spec_verify_ct": sum(r.spec_verify_ct or 0 for r in verify),
        "ttft_ms": [_ms(r.ttft_s) for r in good if r.ttft_s is not None],
        "tpot_ms": [_ms(tpot) for r in good if (tpot := r.tpot_s) is not None],
        "latency_ms": [_ms(r.latency_s) for r in good],
        "itl_count": sum(len(r.itl_s) for r in good),
        "itl_ms": _rank_sample([_ms(gap) for r in good for gap in r.itl_s], ITL_SAMPLE_LIMIT),
    }


async def run_async(workload: Workload) -> dict[str, Any]:
    """The whole benchmark: every concurrency level in order, as the document ``main`` prints."""
    workload.check()
    most = max(workload.concurrency)
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
    timeout_s = workload.request_timeout_s
    async with httpx.AsyncClient(base_url=workload.url, limits=limits, timeout=timeout_s) as client:
        levels = [await run_level(client, workload, c) for c in workload.concurrency]
    settings = {option.name: getattr(workload, option.name) for option in fields(workload)}
    return {"schema": SCHEMA, "url": settings.pop("url"), "workload": settings, "levels": levels}


def run(workload: Workload) -> dict[str, Any]:
    """Blocking form of ``run_async`` for callers without an event loop."""
    return asyncio.run(run_async(workload))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; JSON on stdout, exit 0; or a sentence on stderr and exit 1."""
    try:
        workload = parse_args(argv)
        document = run(workload)
    except LoadgenError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 1
    json.dump(document, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0
