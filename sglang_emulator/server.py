"""SGLang's HTTP API over the emulated engine: native routes, OpenAI-compatible routes, metrics.

A ``ThreadingHTTPServer`` with one thread per connection; streaming responses are SSE over
chunked transfer encoding, as uvicorn sends them. Access lines follow uvicorn's format.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sglang_emulator import info_routes, openai_routes
from sglang_emulator.context import ServerContext
from sglang_emulator.engine import Chunk, Request
from sglang_emulator.http_common import BadRequest, InputRefused, sse
from sglang_emulator.tokenizer import encode

__all__ = ["EmulatorHttpServer", "ServerContext", "make_http_server"]

_DEFAULT_MAX_NEW_TOKENS = 128


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

    def parse_request(self) -> bool:
        # The request's arrival: its first line was just read. Its latency counts from here, as a
        # server's does from when the request reached it.
        self.received_s = time.monotonic()
        return super().parse_request()

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
            "/model_info": lambda: info_routes.model_info(self),
            "/get_model_info": lambda: info_routes.model_info(self),
            "/server_info": lambda: info_routes.server_info(self),
            "/get_server_info": lambda: info_routes.server_info(self),
            "/flush_cache": lambda: info_routes.flush_cache(self),
            "/metrics": lambda: info_routes.metrics(self),
            "/get_load": lambda: info_routes.get_load(self),
            "/v1/models": lambda: info_routes.models(self),
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
        context = self.server.context
        if not context.ready.is_set():
            self._send(503, b"", "text/plain")
            return
        if context.engine.stalled:
            # SGLang's check sends a one-token generation and waits for the scheduler to answer
            # anything; a stuck scheduler never does, so it gives up after its timeout.
            started = time.time()
            time.sleep(context.health_check_timeout_s)
            context.log.error(
                "Health check failed. Server couldn't get a response from detokenizer for last %d "
                "seconds. tic start time: %s. last_heartbeat time: %s",
                context.health_check_timeout_s,
                time.strftime("%H:%M:%S", time.localtime(started)),
                time.strftime("%H:%M:%S", time.localtime(context.engine.stalled_unix_s)),
            )
            self._send(503, b"", "text/plain")
            return
        self._send(200, b"", "text/plain")

    def _tracked(self, handler: Callable[[], None]) -> None:
        # From the request's arrival to its last byte: what a router drain must wait for.
        context = self.server.context
        context.track(+1)
        try:
            handler()
        finally:
            context.track(-1)

    # --- generation -----------------------------------------------------------------------

    def _fault_gate(self) -> bool:
        context = self.server.context
        number = context.next_generation_number()
        context.on_generation_received(number)
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
        problem = self.server.context.engine.input_problem(len(prompt_ids))
        if problem is not None:
            raise InputRefused(problem)
        request = Request(
            rid=rid or uuid.uuid4().hex,
            prompt_ids=prompt_ids,
            max_new_tokens=max_new_tokens,
            created_s=self.received_s,
        )
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
        try:
            request = self._new_request(prompt, max_new, body.get("rid"))
        except InputRefused as refused:
            if not body.get("stream"):
                raise
            self._stream(self._aborted_events(body.get("rid"), len(prompt), str(refused)))
            return
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

    def _aborted_events(self, rid: Any, prompt_tokens: int, message: str) -> Iterator[bytes]:
        """The stream of a request the scheduler aborted before it ran."""
        finish = {"type": "abort", "message": message, "status_code": 400}
        meta = {"id": rid or uuid.uuid4().hex, "finish_reason": finish, "prompt_tokens": prompt_tokens}
        yield sse({"text": "", "output_ids": [], "meta_info": {**meta, "completion_tokens": 0}})
        yield b"data: [DONE]\n\n"

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
