"""What every route of the emulator's HTTP server shares: the bad-request error and SSE framing."""

from __future__ import annotations

import json
from typing import Any


class BadRequest(Exception):
    """A request the server answers with 400 and this message."""


class InputRefused(BadRequest):
    """A prompt the scheduler refuses (longer than its pool lets a request be): 400 unless the
    request streams, which SGLang answers with one aborted chunk."""


class InternalError(Exception):
    """A request the scheduler aborted for a fault of the server's (a disaggregated worker's KV that
    never came): 500 and this message."""


def sse(payload: Any) -> bytes:
    """One server-sent event carrying ``payload`` as compact JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
