"""SGLang's HTTP API over the emulated engine: native routes, OpenAI-compatible routes, metrics.

A ``ThreadingHTTPServer`` with one thread per connection; streaming responses are SSE over
chunked transfer encoding, as uvicorn sends them. Access lines follow uvicorn's format.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sglang_emulator import openai_routes
from sglang_emulator.engine import Chunk, Engine, Request
from sglang_emulator.faults import Faults
from sglang_emulator.http_common import BadRequest, sse
from sglang_emulator.launch import LaunchConfig
from sglang_emulator.memory import MemoryPlan
from sglang_emulator.metrics import render_metrics
from sglang_emulator.profile import Profile
from sglang_emulator.tokenizer import encode

__all__ = ["EmulatorHttpServer", "ServerContext", "make_http_server"]

_DEFAULT_MAX_NEW_TOKENS = 128


@dataclass
class ServerContext:
    """Everything the handlers read: the launch, its plan, the engine and the readiness state."""

    config: LaunchConfig
    profile: Profile
    plan: MemoryPlan
    engine: Engine
    faults: Faults
    emulator_note: str
    on_generation_finished: Callable[[], None]
    ready: threading.Event = field(default_factory=threading.Event)
    started_s: float = field(default_factory=time.time)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _generation_requests: int = 0
    in_flight: int = 0
    """Generation requests received and not yet answered in full (``/get_load``'s ``num_reqs``)."""

    def track(self, delta: int) -> None:
        """Counts a generation request in (+1) or out (-1)."""
        with self._lock:
            self.in_flight += delta

    def next_generation_number(self) -> int:
        with self._lock:
            self._generation_requests += 1
            return self._generation_requests

    def server_info(self) -> dict[str, Any]:
        stats = self.engine.stats
        internal: dict[str, Any] = {
            "last_gen_throughput": stats.last_gen_throughput,
            "max_total_num_tokens": self.plan.max_total_num_tokens,
            "effective_max_running_requests_per_dp": self.plan.max_running_requests,
            "memory_usage": {
                "weight": round(self.plan.weights_gib + self.plan.draft_weights_gib, 2),
                "kvcache": round(max(self.plan.kv_pool_gib, 0.0), 2),
                "token_capacity": self.plan.max_total_num_tokens,
                "graph": round(self.plan.cuda_graph_gib + self.plan.draft_cuda_graph_gib, 2),
            },
        }
        if self.config.speculative is not None:
            internal["avg_spec_accept_length"] = stats.avg_spec_accept_length
        info = dict(self.config.server_args)
        info.update(
            mem_fraction_static=self.plan.mem_fraction_static,
            max_running_requests=self.plan.max_running_requests,
            internal_states=[internal],
            version=self.config.release,
            emulator={
                "name": "sglang-emulator",
                "emulated_sglang_version": self.config.release,
                "profile": self.profile.name,
                "profile_source": self.profile.source,
                "note": self.emulator_note,
            },
        )
        return info


class EmulatorHttpServer(ThreadingHTTPServer):
    """The listening server; ``context`` is shared by every handler thread."""

    daemon_threads = True
    request_queue_size = 1024
    context: ServerContext


def make_http_server(context: ServerContext) -> EmulatorHttpServer:
    """Bind the launch's host and port (``OSError`` when that fails, as uvicorn would report)."""
    server = EmulatorHttpServer((context.config.host, context.config.port), _Handler)
    server.context = context
    return server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EmulatorHttpServer

    # --- plumbing -------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        # Small SSE writes must leave at once (uvicorn's asyncio transports do the same);
        # Nagle's algorithm would hold a chunk back until the previous one is acknowledged.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _access_log(self, status: int) -> None:
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        host, port = self.client_address[:2]
        line = (
            f'INFO:     {host}:{port} - "{self.command} {self.path} {self.request_version}" {status} {phrase}'
        )
        print(line, file=sys.stderr, flush=True)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self._access_log(status)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode())

    def _error(self, status: int, message: str) -> None:
        self._json(
            status, {"object": "error", "message": message, "type": HTTPStatus(status).phrase, "code": status}
        )

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"The request body is not valid JSON ({exc}). Send a JSON object.") from exc
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        return body

    def _stream(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._access_log(200)
        for event in events:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # --- dispatch -------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        path = self.path.split("?", 1)[0]
        routes: dict[str, Callable[[], None]] = {
            "/health": self._health,
            "/health_generate": self._health,
            "/model_info": self._model_info,
            "/get_model_info": self._model_info,
            "/server_info": self._server_info,
            "/get_server_info": self._server_info,
            "/flush_cache": self._flush_cache,
            "/metrics": self._metrics,
            "/get_load": self._get_load,
            "/v1/models": self._models,
            "/generate": self._generate,
            "/v1/completions": lambda: openai_routes.completions(self),
            "/v1/chat/completions": lambda: openai_routes.chat_completions(self),
        }
        posts = {"/generate", "/v1/completions", "/v1/chat/completions"}
        handler = routes.get(path)
        try:
            if handler is None:
                self._body()
                self._json(404, {"detail": "Not Found"})
                return
            if (path in posts) != (self.command == "POST") and path != "/flush_cache":
                self._body()
                self._json(405, {"detail": "Method Not Allowed"})
                return
            api_key = self.server.context.config.api_key
            open_paths = {"/health", "/health_generate", "/metrics"}
            if (
                api_key
                and path not in open_paths
                and self.headers.get("Authorization") != f"Bearer {api_key}"
            ):
                self._body()
                self._json(401, {"error": "Unauthorized"})
                return
            if path in posts:
                self._tracked(handler)
            else:
                handler()
        except BadRequest as exc:
            self._error(400, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- routes ---------------------------------------------------------------------------

    def _health(self) -> None:
        self._body()
        if not self.server.context.ready.is_set():
            self._send(503, b"", "text/plain")
            return
        self._send(200, b"", "text/plain")

    def _model_info(self) -> None:
        context = self.server.context
        self._json(
            200,
            {
                "model_path": context.config.model_path,
                "tokenizer_path": context.config.server_args.get("tokenizer_path"),
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": context.profile.model.model_type,
                "architectures": [context.profile.model.architecture],
            },
        )

    def _server_info(self) -> None:
        self._json(200, self.server.context.server_info())

    def _tracked(self, handler: Callable[[], None]) -> None:
        # From the request's arrival to its last byte: what a router drain must wait for.
        context = self.server.context
        context.track(+1)
        try:
            handler()
        finally:
            context.track(-1)

    def _get_load(self) -> None:
        # SGLang's /get_load: one entry per data-parallel rank (the emulator has one).
        context = self.server.context
        stats = context.engine.stats
        self._json(
            200,
            [
                {
                    "dp_rank": 0,
                    "num_reqs": context.in_flight,
                    "num_waiting_reqs": stats.queued,
                    "num_tokens": int(context.engine.token_usage() * context.plan.max_total_num_tokens),
                }
            ],
        )

    def _flush_cache(self) -> None:
        self._body()
        if not self.server.context.engine.flush_cache():
            message = "Cache not flushed: requests are running or waiting. Retry when the server is idle.\n"
            self._send(400, message.encode(), "text/plain")
            return
        message = (
            "Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation will not be performed.)\n"
        )
        self._send(200, message.encode(), "text/plain")

    def _metrics(self) -> None:
        context = self.server.context
        if not context.config.enable_metrics:
            self._json(404, {"detail": "Not Found"})
            return
        stats = context.engine.stats
        gauges = {
            "sglang:num_running_reqs": ("The number of running requests.", stats.running),
            "sglang:num_queue_reqs": ("The number of requests in the waiting queue.", stats.queued),
            "sglang:gen_throughput": ("The generation throughput (token/s).", stats.last_gen_throughput),
            "sglang:token_usage": ("The token usage.", context.engine.token_usage()),
            "sglang:spec_accept_length": (
                "The average acceptance length of speculative decoding.",
                stats.avg_spec_accept_length,
            ),
            "sglang:max_total_num_tokens": (
                "Maximum total tokens in the KV cache.",
                context.plan.max_total_num_tokens,
            ),
        }
        counters = {
            "sglang:prompt_tokens_total": ("Number of prefill tokens processed.", stats.prompt_tokens_total),
            "sglang:generation_tokens_total": (
                "Number of generation tokens processed.",
                stats.generation_tokens_total,
            ),
            "sglang:cached_tokens_total": ("Number of cached prompt tokens.", stats.cached_tokens_total),
            "sglang:num_requests_total": ("Number of requests processed.", stats.requests_total),
        }
        histograms = {
            "sglang:time_to_first_token_seconds": (
                "Histogram of time to first token in seconds.",
                stats.ttft,
            ),
            "sglang:e2e_request_latency_seconds": (
                "Histogram of End-to-end request latency in seconds",
                stats.e2e,
            ),
            "sglang:inter_token_latency_seconds": (
                "Histogram of inter-token latency in seconds.",
                stats.inter_token,
            ),
        }
        text = render_metrics(context.config.served_model_name, gauges, counters, histograms)
        self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _models(self) -> None:
        context = self.server.context
        model = {
            "id": context.config.served_model_name,
            "object": "model",
            "created": int(context.started_s),
            "owned_by": "sglang",
            "root": context.config.model_path,
            "max_model_len": context.config.context_length,
        }
        self._json(200, {"object": "list", "data": [model]})

    # --- generation -----------------------------------------------------------------------

    def _fault_gate(self) -> bool:
        context = self.server.context
        number = context.next_generation_number()
        if context.faults.is_error_burst(number):
            status = context.faults.error_burst_status
            self._error(
                status,
                f"Internal server error (sglang-emulator injected fault: error burst, request {number}).",
            )
            return False
        return True

    def _new_request(self, prompt_ids: list[int], max_new_tokens: Any, rid: str | None) -> Request:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise BadRequest(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}.")
        context_len = self.server.context.config.context_length
        if len(prompt_ids) + max_new_tokens > context_len:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {context_len} tokens. "
                f"You requested a total of {len(prompt_ids) + max_new_tokens} tokens: {len(prompt_ids)} "
                f"tokens from the input and {max_new_tokens} tokens for the completion. Reduce either."
            )
        request = Request(rid=rid or uuid.uuid4().hex, prompt_ids=prompt_ids, max_new_tokens=max_new_tokens)
        self.server.context.engine.submit(request)
        return request

    def _prompt_ids(self, text: Any, input_ids: Any) -> list[int]:
        vocab = self.server.context.profile.model.vocab_size
        if isinstance(text, str):
            return encode(text, vocab)
        if isinstance(input_ids, list) and input_ids and all(isinstance(i, int) for i in input_ids):
            outside = [i for i in input_ids if not 0 <= i < vocab]
            if outside:
                raise BadRequest(
                    f"Token id {outside[0]} is outside the vocabulary (0 to {vocab - 1}); send ids the "
                    "model's tokenizer produces."
                )
            return list(input_ids)
        raise BadRequest("Give the prompt as 'text' (a string) or 'input_ids' (a list of integers).")

    def _chunks(self, request: Request) -> Iterator[Chunk]:
        try:
            while True:
                chunk = request.chunks.get()
                yield chunk
                if chunk.finished:
                    return
        finally:
            if request.finished_s is None:
                request.aborted = True

    def _meta(self, request: Request, finished: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": request.rid,
            "finish_reason": {"type": "length", "length": request.max_new_tokens} if finished else None,
            "prompt_tokens": len(request.prompt_ids),
            "weight_version": "default",
            "completion_tokens": request.completion_tokens,
            "cached_tokens": request.cached_tokens,
        }
        if self.server.context.config.speculative is not None:
            meta["spec_verify_ct"] = request.spec_verify_ct
        if finished and request.finished_s is not None:
            meta["e2e_latency"] = request.finished_s - request.created_s
        return meta

    def _finished(self) -> None:
        self.server.context.on_generation_finished()

    def _generate(self) -> None:
        body = self._body()
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise BadRequest("sampling_params must be an object.")
        max_new = params.get("max_new_tokens", _DEFAULT_MAX_NEW_TOKENS)
        texts = body.get("text")
        if isinstance(texts, list):
            if body.get("stream"):
                raise BadRequest(
                    "The emulator streams one prompt per request; send a string 'text' to stream."
                )
            if not self._fault_gate():
                return
            requests = [self._new_request(self._prompt_ids(t, None), max_new, None) for t in texts]
            for request in requests:
                for _ in self._chunks(request):
                    pass
            self._json(200, [self._generate_payload(r) for r in requests])
            self._finished()
            return
        prompt = self._prompt_ids(texts, body.get("input_ids"))
        if not self._fault_gate():
            return
        request = self._new_request(prompt, max_new, body.get("rid"))
        if body.get("stream"):
            self._stream(self._generate_events(request))
        else:
            for _ in self._chunks(request):
                pass
            self._json(200, self._generate_payload(request))
        self._finished()

    def _generate_payload(self, request: Request) -> dict[str, Any]:
        """The non-streaming reply of a finished request."""
        return {
            "text": request.output_text,
            "output_ids": request.output_ids,
            "meta_info": self._meta(request, True),
        }

    def _generate_events(self, request: Request) -> Iterator[bytes]:
        # SGLang streams the whole output so far in every chunk, or only the new part with
        # --incremental-streaming-output (--stream-output before 0.5.13); completion_tokens in
        # meta_info counts the whole output either way.
        args = self.server.context.config.server_args
        incremental = bool(args.get("incremental_streaming_output") or args.get("stream_output"))
        text = ""
        count = 0
        for chunk in self._chunks(request):
            text = chunk.new_text if incremental else text + chunk.new_text
            start = count if incremental else 0
            count += len(chunk.new_token_ids)
            meta = self._meta(request, chunk.finished)
            meta["completion_tokens"] = count
            yield sse({"text": text, "output_ids": request.output_ids[start:count], "meta_info": meta})
        yield b"data: [DONE]\n\n"
