"""Prefill/decode disaggregation as SGLang runs it, at the interfaces the tool and the router touch.

A prefill worker (``--disaggregation-mode prefill``) runs a bootstrap server on
``--disaggregation-bootstrap-port``; each request it prefills carries a bootstrap room, and its KV
waits there for the decode worker of the same room. A decode worker pulls that KV before it decodes.
SGLang moves the KV with its transfer backend (RDMA for mooncake); the emulator moves a description
of it over HTTP from the bootstrap server and takes the time the real transfer would: the KV's bytes
over the host network's bandwidth (the profile's ``host.network``), plus one hop of latency.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "BootstrapServer",
    "KvHandoff",
    "PrefilledKv",
    "TransferFailed",
    "bootstrap_fields",
    "pull_kv",
    "transfer_s",
]


class TransferFailed(Exception):
    """The decode worker could not get a request's KV: in its ``stage`` (``handshake`` with the
    bootstrap server, or ``transfer`` of the KV), for SGLang's ``reason``."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(reason)
        self.stage = stage
        self.reason = reason


@dataclass(frozen=True)
class PrefilledKv:
    """What a prefill worker hands over for one bootstrap room."""

    room: int
    prompt_tokens: int
    first_token_id: int
    kv_bytes: int
    """The KV cache of the prompt over every rank of the prefill worker."""


@dataclass
class KvHandoff:
    """The prefill worker's rooms whose KV is ready, until a decode worker takes each."""

    _ready: dict[int, PrefilledKv] = field(default_factory=dict)
    _taken: set[int] = field(default_factory=set)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def publish(self, kv: PrefilledKv) -> None:
        with self._changed:
            self._ready[kv.room] = kv
            self._changed.notify_all()

    @property
    def inflight(self) -> int:
        """Rooms prefilled whose KV no decode worker has taken yet (SGLang's ``#inflight-req``)."""
        with self._changed:
            return len(self._ready)

    def wait_taken(self, room: int, timeout_s: float) -> bool:
        """Whether a decode worker took room ``room``'s KV within ``timeout_s``; a room not taken
        by then is dropped, as SGLang's sender gives up on it."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while room not in self._taken:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._ready.pop(room, None)
                    return False
                self._changed.wait(left)
            self._taken.discard(room)
            return True

    def take(self, room: int, timeout_s: float) -> PrefilledKv | None:
        """Room ``room``'s KV once it is ready, or None after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while room not in self._ready:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)
            self._taken.add(room)
            self._changed.notify_all()
            return self._ready.pop(room)


def bootstrap_fields(body: dict[str, Any], mode: str) -> tuple[str, int, int] | None:
    """The request's ``bootstrap_host``, ``bootstrap_port`` and ``bootstrap_room``; None when it has
    none. A worker in PD mode serves only requests the router paired."""
    host, port, room = (body.get(k) for k in ("bootstrap_host", "bootstrap_port", "bootstrap_room"))
    if host is None and room is None:
        return None
    if not isinstance(host, str) or not isinstance(port, int) or not isinstance(room, int):
        raise ValueError(
            f"A {mode} worker needs bootstrap_host (a string), bootstrap_port and bootstrap_room (integers); "
            f"got {host!r}, {port!r}, {room!r}."
        )
    return host, port, room


def transfer_s(kv_bytes: int, bandwidth_gbit_s: float, latency_us: float) -> float:
    """How long the KV takes over one host's link: its bits over the bandwidth, plus one hop."""
    return kv_bytes * 8 / (bandwidth_gbit_s * 1e9) + latency_us / 1e6


class BootstrapServer(ThreadingHTTPServer):
    """A prefill worker's bootstrap server: where decode workers learn the prefill worker's
    parallel layout (``GET /route``) and take each room's KV (``GET /kv?room=``, the emulator's
    stand-in for the transfer engine)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], layout: dict[str, Any], handoff: KvHandoff) -> None:
        super().__init__(address, _BootstrapHandler)
        self.layout = layout
        self.handoff = handoff

    def serve_in_background(self) -> None:
        threading.Thread(target=self.serve_forever, name="bootstrap", daemon=True).start()


class _BootstrapHandler(BaseHTTPRequestHandler):
    server: BootstrapServer

    def setup(self) -> None:
        super().setup()
        # The answer's small writes must leave at once: with Nagle's algorithm the last one waits for
        # the client's delayed acknowledgement (40 ms), and every decode worker's transfer with it.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if parts.path == "/health":
            self._json(200, {"status": "ok"})
        elif parts.path == "/route":
            self._route(query)
        elif parts.path == "/kv":
            try:
                room = int(query["room"][0])
                timeout_s = float(query.get("timeout_s", ["30"])[0])
            except (KeyError, ValueError):
                self._json(400, {"error": "give room (an integer) and timeout_s"})
                return
            kv = self.server.handoff.take(room, timeout_s)
            if kv is None:
                self._json(404, {"error": f"no KV for bootstrap room {room} within {timeout_s:g} s"})
                return
            self._json(
                200,
                {
                    "room": kv.room,
                    "prompt_tokens": kv.prompt_tokens,
                    "first_token_id": kv.first_token_id,
                    "kv_bytes": kv.kv_bytes,
                },
            )
        else:
            self._json(404, {"error": "Not Found"})

    def _route(self, query: dict[str, list[str]]) -> None:
        """SGLang's ``GET /route``: with every rank -1, the prefill worker's parallel layout; a
        rank's own bootstrap entry is the transfer engine's, which the emulator does not run."""
        ranks = [query.get(name, [""])[0] for name in ("engine_rank", "target_dp_group", "target_pp_rank")]
        if not all(ranks):
            self._text(400, "Missing inputs for bootstrap server.")
        elif ranks == ["-1", "-1", "-1"]:
            self._json(200, self.server.layout)
        else:
            self._text(404, "Bootstrap info not Found")

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, "application/json", json.dumps(payload).encode())

    def _text(self, status: int, text: str) -> None:
        self._send(status, "text/plain; charset=utf-8", text.encode())

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


_LAYOUTS: dict[tuple[str, int], dict[str, Any]] = {}
"""Each bootstrap server's layout, fetched once (SGLang's ``prefill_*_table`` by bootstrap address)."""
_LAYOUT_QUERY = "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1"
"""The decode worker's handshake: the prefill worker's parallel layout, asked as SGLang asks it."""


def handshake(host: str, port: int, page_size: int) -> dict[str, Any]:
    """The prefill worker's layout from its bootstrap server at ``host:port``, as a decode worker with
    ``page_size`` fetches it before its first transfer from there; TransferFailed when it cannot be
    fetched or the page sizes differ (SGLang's words for each)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{_LAYOUT_QUERY}", timeout=10) as answer:
            layout: dict[str, Any] = json.loads(answer.read())
    except (OSError, ValueError):
        raise TransferFailed(
            "handshake", f"Could not fetch prefill parallel info from bootstrap_addr: {host}:{port}"
        ) from None
    prefill_page_size = layout.get("prefill_page_size")
    if prefill_page_size is not None and prefill_page_size != page_size:
        raise TransferFailed(
            "handshake",
            f"Page size mismatch: prefill server has page_size={prefill_page_size}, but decode server has "
            f"page_size={page_size}. Both servers must use the same --page-size value.",
        )
    return layout


def pull_kv(host: str, port: int, room: int, timeout_s: float, page_size: int = 1) -> PrefilledKv:
    """Room ``room``'s KV from the prefill worker's bootstrap server at ``host:port``, once its
    prefill is done, after the handshake (`handshake`, once per bootstrap server, as SGLang keeps
    each server's layout); TransferFailed when the server cannot be reached, the page sizes differ,
    or the KV does not come within ``timeout_s`` (SGLang's ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``)."""
    if (host, port) not in _LAYOUTS:
        _LAYOUTS[(host, port)] = handshake(host, port, page_size)
    url = f"http://{host}:{port}/kv?room={room}&timeout_s={timeout_s:g}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s + 5) as answer:
            found = json.loads(answer.read())
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise TransferFailed(
                "transfer", f"Request {room} timed out after {timeout_s:.1f}s in KVPoll.WaitingForInput"
            ) from None
        raise TransferFailed("transfer", f"KV transfer of request {room} failed: HTTP {error.code}") from None
    except (OSError, ValueError):
        raise TransferFailed(
            "handshake", f"Could not fetch prefill parallel info from bootstrap_addr: {host}:{port}"
        ) from None
    return PrefilledKv(
        room=int(found["room"]),
        prompt_tokens=int(found["prompt_tokens"]),
        first_token_id=int(found["first_token_id"]),
        kv_bytes=int(found["kv_bytes"]),
    )
