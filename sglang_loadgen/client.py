"""The load generator's client: runs each load level of a ``Workload`` (warmup, then measured
repetitions) over one of the server's streaming routes, into one JSON document.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import secrets
import sys
import time
from typing import Any

import aiohttp

from .contract import LoadgenError, LoadgenExit, Workload, parse_args
from .document import SCHEMA, Document, Level, Record, Repetition
from .health import watch_health
from .progress import Progress
from .prompts import SHAREGPT_SAMPLE, WORDS, PromptSource, read_sharegpt
from .shapes import arrival_gaps_s, closed_loop, open_loop
from .streaming import RequestRecord, client_session, stream_one

__all__ = ["ITL_SAMPLE_LIMIT", "main", "run", "run_async", "summarize_level"]

ITL_SAMPLE_LIMIT = 20_000
"""Above this many inter-token gaps per level, ``itl_ms`` keeps a rank sample so the output stays small."""
BUNCHED_GAP_S = 0.001
"""Inter-token gaps below this are tokens that arrived together: reported as ``itl_bunched_pct``."""


class _Run:
    """One run's shared state: the client, the numbered prompts, the progress file."""

    def __init__(self, client: aiohttp.ClientSession, workload: Workload, prompts: PromptSource, model: str):
        self.client = client
        self.workload = workload
        self.prompts = prompts
        self.model = model
        self.number = 0
        self.progress = Progress(workload.progress_file)

    async def send(self) -> RequestRecord:
        prompt = self.prompts.prompt(self.number)
        self.number += 1
        record = await stream_one(self.client, self.workload, prompt, self.model, self.progress.streamed)
        self.progress.count(record.error)
        return record

    async def batch(self, level: float, total: int, rep: int) -> list[RequestRecord]:
        """One batch of requests at ``level``: a repetition (``rep`` >= 0) or the warmup (-1)."""
        workload = self.workload
        duration_s = workload.duration_s if rep >= 0 else 0.0
        if not workload.open_loop:
            return await closed_loop(self.send, int(level), total, duration_s)
        rng = random.Random(f"{workload.seed}/{level:g}/{rep}")
        return await open_loop(self.send, arrival_gaps_s(level, workload.burstiness, rng), total, duration_s)


def _ms(value_s: float) -> float:
    return round(value_s * 1000.0, 3)


def _rank_sample(values: list[float], limit: int) -> list[float]:
    """At most ``limit`` values at even ranks of the sorted list: percentiles survive, size is bounded."""
    if len(values) <= limit:
        return values
    ordered = sorted(values)
    return [ordered[round(i * (len(ordered) - 1) / (limit - 1))] for i in range(limit)]


def _repetition(records: list[RequestRecord]) -> Repetition:
    good = [r for r in records if r.error is None]
    started = min(r.sent_s for r in records)
    duration_s = max(r.finished_s for r in records) - started
    tokens = sum(r.completion_tokens for r in good)
    busy_s = sum(r.latency_s for r in records)
    return Repetition(
        tok_s=tokens / duration_s if duration_s > 0 else 0.0,
        duration_s=round(duration_s, 6),
        completion_tokens=tokens,
        requests=len(records),
        errors=len(records) - len(good),
        # Little's law: the mean number of requests in flight over the repetition.
        concurrency_measured=round(busy_s / duration_s, 3) if duration_s > 0 else 0.0,
    )


def summarize_level(
    workload: Workload, level: float, runs: list[list[RequestRecord]], warm: list[RequestRecord]
) -> Level:
    """One level's part of the document: per-repetition totals and one record per good request."""
    measured = [r for run in runs for r in run]
    good = [r for r in measured if r.error is None]
    records = []
    for rep, run in enumerate(runs):
        start = min(r.sent_s for r in run)
        for r in run:
            if r.error is None:
                tpot = r.tpot_s
                records.append(
                    Record(
                        repetition=rep,
                        sent_s=round(r.sent_s - start, 6),
                        ttft_ms=_ms(r.ttft_s or 0.0),
                        tpot_ms=None if tpot is None else _ms(tpot),
                        e2e_ms=_ms(r.latency_s),
                        completion_tokens=r.completion_tokens,
                    )
                )
    errors = [r.error for r in measured if r.error is not None]
    kinds = [r.error_kind for r in measured if r.error_kind is not None]
    verify = [r for r in good if r.spec_verify_ct]
    gaps = [gap for r in good for gap in r.itl_s]
    return Level(
        concurrency=None if workload.open_loop else int(level),
        request_rate=level if workload.open_loop else None,
        repetitions=[_repetition(run) for run in runs],
        requests=len(measured),
        errors=len(errors),
        error_samples=sorted(set(errors))[:5],
        error_kinds={kind: kinds.count(kind) for kind in sorted(set(kinds))},
        warmup_errors=sum(1 for r in warm if r.error is not None),
        prompt_tokens_mean=round(sum(r.prompt_tokens for r in good) / len(good), 2) if good else 0.0,
        completion_tokens=sum(r.completion_tokens for r in good),
        spec_completion_tokens=sum(r.completion_tokens for r in verify),
        spec_verify_ct=sum(r.spec_verify_ct or 0 for r in verify),
        records=records,
        itl_count=len(gaps),
        itl_bunched_pct=round(100.0 * sum(g < BUNCHED_GAP_S for g in gaps) / len(gaps), 2) if gaps else 0.0,
        itl_ms=_rank_sample([_ms(gap) for gap in gaps], ITL_SAMPLE_LIMIT),
    )


def _level_name(workload: Workload, level: float) -> str:
    return f"request rate {level:g}/s" if workload.open_loop else f"concurrency {int(level)}"


async def run_level(run: _Run, level: float) -> Level:
    """Warm up, then run every repetition at one level."""
    workload = run.workload
    name = _level_name(workload, level)
    run.progress.phase(name, "warmup", 0, workload.repetitions)
    warm = await run.batch(level, workload.warmup_requests, -1) if workload.warmup_requests else []
    runs = []
    for rep in range(workload.repetitions):
        run.progress.phase(name, "measure", rep + 1, workload.repetitions)
        runs.append(await run.batch(level, workload.requests_per_repetition, rep))
    run.progress.phase(name, "done", workload.repetitions, workload.repetitions)
    return summarize_level(workload, level, runs, warm)


async def _json(client: aiohttp.ClientSession, url: str, body: dict[str, Any] | None = None) -> Any:
    """A preparing request's JSON answer (GET without a body, POST with one)."""
    call = client.get(url) if body is None else client.post(url, json=body)
    async with call as reply:
        reply.raise_for_status()
        return await reply.json(content_type=None)


async def _prepare(client: aiohttp.ClientSession, workload: Workload, nonce: int) -> tuple[PromptSource, str]:
    """What the prompts need from the server: the model's name, the chat template's length, the
    length of ShareGPT answers (counted by the server, without generating)."""
    base = workload.url.rstrip("/")
    model = ""
    if workload.endpoint != "generate":
        listed = await _json(client, base + "/v1/models")
        model = str(listed["data"][0]["id"])
    overhead = 0
    if workload.endpoint == "chat" and workload.dataset != "sharegpt":
        words = " ".join(random.Random(f"{nonce}/probe").choices(WORDS, k=16))
        body = {"model": model, "messages": [{"role": "user", "content": words}], "max_tokens": 1}
        usage = (await _json(client, base + "/v1/chat/completions", body))["usage"]
        overhead = int(usage["prompt_tokens"]) - 16
    if workload.dataset != "sharegpt":
        return PromptSource(workload, nonce, chat_overhead=overhead), model
    conversations = read_sharegpt(workload.dataset_path, workload.seed)[:SHAREGPT_SAMPLE]
    answers = []
    for conversation in conversations:
        body = {"text": conversation.answer, "sampling_params": {"max_new_tokens": 0}}
        reply = await _json(client, base + "/generate", body)
        answers.append(max(1, int(reply["meta_info"]["prompt_tokens"])))
    return PromptSource(workload, nonce, conversations=conversations, answer_tokens=answers), model


async def _measure_watching_health(run: _Run, levels: list[Level]) -> None:
    """Every level into ``levels``, while the server's health is watched; ServerHangs stops it."""
    measuring = asyncio.ensure_future(_run_levels(run, levels))
    watching = asyncio.ensure_future(watch_health(run.workload.url))
    try:
        await asyncio.wait({measuring, watching}, return_when=asyncio.FIRST_COMPLETED)
        if watching.done():
            watching.result()  # raises ServerHangs; a watch that ended without a verdict stops nothing
        await measuring
    finally:
        for task in (measuring, watching):
            task.cancel()
        await asyncio.gather(measuring, watching, return_exceptions=True)


async def _run_levels(run: _Run, levels: list[Level]) -> None:
    for level in run.workload.levels:
        levels.append(await run_level(run, level))
        if levels[-1].every_request_failed:
            break  # the next levels would only fail the same way


async def run_async(workload: Workload, nonce: int | None = None) -> Document:
    """The whole benchmark: every level in order, as the document ``main`` prints."""
    workload.check()
    nonce = secrets.randbits(62) if nonce is None else nonce
    # Closed loop: one connection per stream, kept alive; open loop: as many as are in flight.
    streams = 0 if workload.open_loop else max(workload.concurrency)
    connector = aiohttp.TCPConnector(limit=streams, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=workload.request_timeout_s)
    started = time.time()
    async with client_session(connector=connector, timeout=timeout) as client:
        try:
            prompts, model = await _prepare(client, workload, nonce)
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise LoadgenError(
                f"The server at {workload.url} did not answer the preparing requests ({exc!r}); "
                "check that it is ready (GET /health) and serves the route."
            ) from exc
        run = _Run(client, workload, prompts, model)
        levels: list[Level] = []
        async with run.progress.ticking():
            await _measure_watching_health(run, levels)
    return Document(
        schema=SCHEMA,
        nonce=nonce,
        started_unix_s=round(started, 3),
        workload=dataclasses.replace(workload, progress_file=""),  # where progress went is no result
        levels=levels,
    )


def run(workload: Workload, nonce: int | None = None) -> Document:
    """Blocking form of ``run_async`` for callers without an event loop."""
    # uvloop's event loop (libuv) costs about half the CPU per streamed chunk of asyncio's own. SGLang
    # installs it with its server; a host environment without it measures with asyncio's loop.
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run_async(workload, nonce))
    return uvloop.run(run_async(workload, nonce))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; JSON on stdout; or a sentence on stderr (`LoadgenExit` says which). When
    every measured request of a level failed, the run stops there and prints its document all the
    same (how each request failed) with a sentence on stderr."""
    try:
        workload = parse_args(argv)
        document = run(workload)
    except LoadgenError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return LoadgenExit.FAILED
    json.dump(document.to_json(), sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    last = document.levels[-1]
    if last.every_request_failed:
        first = last.error_samples[0] if last.error_samples else "no request was sent"
        print(
            f"loadgen: All {last.requests} requests at {last.name} failed; the first error was: {first}. "
            f"Check that the server at {workload.url} is ready (GET /health) and serves the route.",
            file=sys.stderr,
        )
        return LoadgenExit.EVERY_REQUEST_FAILED
    return LoadgenExit.MEASURED
