"""One streamed request on any of the three routes, timed chunk by chunk.

The client must never be what limits the measurement, so the stream is read as raw bytes and
split into events by hand; a chunk's token count is read from its bytes (``completion_tokens``
of SGLang's ``meta_info``, one per OpenAI content delta) and only the last event, which carries
the totals, is parsed as JSON. Cumulative ``/generate`` streams (SGLang's default) cost no more
than incremental ones this way.

A request is timed from when its bytes go to the connection (``client_session``), not from when
its coroutine asked to send it: when many streams start together, the event loop writes one
request after building and connecting the others, and that wait is the client's, not the server's.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .contract import Workload
from .prompts import Prompt

__all__ = ["RequestRecord", "client_session", "request_body", "stream_one"]

_PATHS = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}
_COUNT = b'"completion_tokens":'
_DIGITS = re.compile(rb"\s*([0-9]+)")
_EMPTY_DELTAS = (b'"content":""', b'"text":""')
_HEADERS = {"Content-Type": "application/json"}


@dataclass
class RequestRecord:
    """What one streamed request measured; times are ``perf_counter`` seconds."""

    sent_s: float = 0.0
    finished_s: float = 0.0
    ttft_s: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    spec_verify_ct: int | None = None
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    """How it failed, one of `document.ERROR_KINDS`, when ``error`` says it did."""

    def fail(self, kind: str, error: str) -> None:
        """Marks the request failed: ``kind`` from `document.ERROR_KINDS`, ``error`` in words."""
        self.error_kind, self.error = kind, error

    @property
    def latency_s(self) -> float:
        return self.finished_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.completion_tokens - 1)


def request_body(workload: Workload, prompt: Prompt, model: str) -> dict[str, Any]:
    """The JSON body of one streamed request on the workload's route."""
    if workload.endpoint == "generate":
        body: dict[str, Any] = {"input_ids": prompt.ids} if prompt.ids is not None else {"text": prompt.text}
        body["sampling_params"] = {
            "max_new_tokens": prompt.output_len,
            "temperature": 0,
            "ignore_eos": workload.ignore_eos,
        }
        body["stream"] = True
        return body
    body = {
        "model": model,
        "max_tokens": prompt.output_len,
        "temperature": 0,
        "ignore_eos": workload.ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if workload.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.ids if prompt.ids is not None else prompt.text
    return body


def _count_after(payload: bytes, previous: int) -> int:
    """Cumulative completion tokens a ``/generate`` event reports (``meta_info`` comes last)."""
    at = payload.rfind(_COUNT)
    if at < 0:
        return previous
    found = _DIGITS.match(payload, at + len(_COUNT))
    return int(found.group(1)) if found else previous


class _Reader:
    """Turns a stream's events into the record's counts and times; ``on_tokens`` hears of each
    token as it arrives."""

    def __init__(self, record: RequestRecord, native: bool, on_tokens: Callable[[int], None]) -> None:
        self.record = record
        self.native = native
        self.on_tokens = on_tokens
        self.last_token_s = record.sent_s
        self.last_event = b""
        self.done = False

    def event(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        self.last_event = payload
        if b'"error"' in payload[:16] or (b'"error":{' in payload):
            self.record.fail("server_error", f"server error: {payload[:200].decode(errors='replace')}")
            self.done = True
            return
        record = self.record
        if self.native:
            tokens = _count_after(payload, record.completion_tokens)
        elif b'"usage":null' in payload and not any(empty in payload for empty in _EMPTY_DELTAS):
            tokens = record.completion_tokens + 1
        else:
            return
        arrived = tokens - record.completion_tokens
        if arrived <= 0:
            return
        if record.ttft_s is None:
            record.ttft_s = now - record.sent_s
        else:
            # A speculative chunk of k tokens counts as k gaps of gap/k.
            gap = (now - self.last_token_s) / arrived
            record.itl_s.extend([gap] * arrived) if arrived > 1 else record.itl_s.append(gap)
        self.last_token_s = now
        record.completion_tokens = tokens
        self.on_tokens(arrived)

    def finish(self) -> None:
        """Read the totals of the last event: prompt tokens, verify steps, an abort."""
        if self.record.error is not None or not self.last_event:
            return
        last = json.loads(self.last_event)
        if self.native:
            meta = last.get("meta_info") or {}
            self.record.prompt_tokens = int(meta.get("prompt_tokens") or 0)
            if meta.get("spec_verify_ct") is not None:
                self.record.spec_verify_ct = int(meta["spec_verify_ct"])
            finish = meta.get("finish_reason")
            if isinstance(finish, dict) and finish.get("type") == "abort":
                self.record.fail("server_abort", f"aborted by the server: {json.dumps(finish)[:200]}")
            return
        usage = last.get("usage") or {}
        self.record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        # Usage counts the tokens; a delta may carry several (speculative decoding).
        counted = int(usage.get("completion_tokens") or self.record.completion_tokens)
        if counted != self.record.completion_tokens:
            self.on_tokens(counted - self.record.completion_tokens)
        self.record.completion_tokens = counted


async def _read_events(content: aiohttp.StreamReader, reader: _Reader) -> None:
    # iter_any hands over whatever the socket brought (aiohttp's C parser has already removed the
    # chunked framing): one await per read, not per line.
    buffer = b""
    async for data in content.iter_any():
        now = time.perf_counter()
        buffer = buffer + data if buffer else data
        start = 0
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            if buffer.startswith(b"data:", start):
                reader.event(buffer[start + 5 : end].strip(), now)
                if reader.done:
                    return
            start = end + 2
        buffer = buffer[start:] if start else buffer


def _kind_of(exc: Exception) -> str:
    """The `document.ERROR_KINDS` entry of a request that raised ``exc``."""
    if isinstance(exc, TimeoutError):  # aiohttp's own timeouts are TimeoutErrors too
        return "timeout"
    return "protocol" if isinstance(exc, ValueError) else "connection"


def _ignore(tokens: int) -> None:
    pass


def client_session(**options: Any) -> aiohttp.ClientSession:
    """A session for ``stream_one`` (``options`` as ``aiohttp.ClientSession`` takes them): it stamps
    each request's ``sent_s`` when its body (after the headers) is handed to the connection."""

    async def on_body_sent(
        session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestChunkSentParams
    ) -> None:
        record = context.trace_request_ctx
        if isinstance(record, RequestRecord):
            record.sent_s = time.perf_counter()

    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(on_body_sent)
    return aiohttp.ClientSession(trace_configs=[trace], **options)


async def stream_one(
    session: aiohttp.ClientSession,
    workload: Workload,
    prompt: Prompt,
    model: str = "",
    on_tokens: Callable[[int], None] = _ignore,
) -> RequestRecord:
    """Send one streaming request and time every chunk it returns; ``on_tokens`` hears of the
    output tokens as they arrive. On a ``client_session`` the request is timed from when it was
    written; on another session, from this call."""
    body = json.dumps(request_body(workload, prompt, model), separators=(",", ":")).encode()
    url = workload.url.rstrip("/") + _PATHS[workload.endpoint]
    record = RequestRecord(sent_s=time.perf_counter())
    reader = _Reader(record, native=workload.endpoint == "generate", on_tokens=on_tokens)
    try:
        async with session.post(url, data=body, headers=_HEADERS, trace_request_ctx=record) as response:
            if response.status != 200:
                text = (await response.read()).decode(errors="replace")[:200]
                kind = "server_status" if response.status >= 500 else "rejected"
                record.fail(kind, f"HTTP {response.status}: {text}")
                return record
            await _read_events(response.content, reader)
        reader.finish()
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        record.fail(_kind_of(exc), f"{type(exc).__name__}: {exc}"[:200])
        return record
    finally:
        record.finished_s = time.perf_counter()
    if record.error is None and record.completion_tokens == 0:
        record.fail("protocol", "the stream ended without any completion tokens")
    expected = prompt.expected_tokens
    if record.error is None and expected is not None and record.prompt_tokens != expected:
        record.fail(
            "protocol",
            f"the server counted {record.prompt_tokens} prompt tokens where the workload sent {expected}; "
            "the benchmark would not measure the declared workload",
        )
    return record
