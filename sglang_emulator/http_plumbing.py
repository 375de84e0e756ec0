"""The emulator's HTTP server and its request handler's plumbing: a request's arrival time, uvicorn's
access lines, JSON bodies and replies, and SSE over chunked transfer encoding."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sglang_emulator.context import ServerContext
from sglang_emulator.http_common import BadRequest

__all__ = ["EmulatorHttpServer", "HandlerPlumbing"]


class EmulatorHttpServer(ThreadingHTTPServer):
    """The listening server; ``context`` is shared by every handler thread."""

    daemon_threads = True
    request_queue_size = 1024
    context: ServerContext


class HandlerPlumbing(BaseHTTPRequestHandler):
    """What every route's handler stands on: reading the request, writing the reply, logging it."""

    protocol_version = "HTTP/1.1"
    server: EmulatorHttpServer

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
