"""What the scheduler tracks: a request, the chunks it streams, the server's counters, and the
prefix cache its prompts are matched against."""

from __future__ import annotations

import queue
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang_emulator.metrics import Histogram
from sglang_emulator.performance import AcceptSampler

__all__ = ["Chunk", "EngineStats", "PrefixCache", "Request"]

_PREFIX_CACHE_ENTRIES = 256


@dataclass
class Chunk:
    """What one scheduler step produced for one request (tokens are cumulative on the request)."""

    new_token_ids: list[int]
    new_text: str
    finished: bool


@dataclass
class Request:
    """One generation request as the scheduler tracks it."""

    rid: str
    prompt_ids: list[int]
    max_new_tokens: int
    created_s: float = field(default_factory=time.monotonic)
    chunks: queue.Queue[Chunk] = field(default_factory=queue.Queue)
    output_ids: list[int] = field(default_factory=list)
    output_text: str = ""
    cached_tokens: int = 0
    spec_verify_ct: int = 0
    first_token_s: float | None = None
    last_chunk_s: float | None = None
    finished_s: float | None = None
    aborted: bool = False
    rng: random.Random | None = None
    sampler: AcceptSampler | None = None
    kv_tokens: int = 0
    """Tokens of the KV pool this request holds."""
    fill_len: int = 0
    """Prompt plus output when it was last admitted: what its prefill computes."""
    filled: int = 0
    """Of ``fill_len``, the tokens prefilled so far (a chunked prompt fills over several batches)."""
    prefilled: bool = False
    """Its KV came from a prefill worker (a decode worker of a disaggregated fleet): admitting it
    takes pool tokens but computes nothing."""
    runnable_s: float | None = None
    """When the scheduler may start it, if later than its arrival: a decode worker's request once
    its KV has arrived."""
    handoff_room: int | None = None
    """On a prefill worker, the bootstrap room its KV goes to: it is answered once a decode worker
    took the KV."""
    on_finished: Callable[[Request], None] | None = None
    """Told when the request has its last token (a prefill worker hands its KV over then)."""

    @property
    def ready_s(self) -> float:
        """When the scheduler may start it (monotonic seconds)."""
        return self.created_s if self.runnable_s is None else self.runnable_s

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)


@dataclass
class EngineStats:
    """Counters ``/server_info`` and ``/metrics`` report."""

    running: int = 0
    queued: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    cached_tokens_total: int = 0
    requests_total: int = 0
    verify_ct_total: int = 0
    accepted_tokens_total: int = 0
    retracted_requests_total: int = 0
    retracted_input_tokens_total: int = 0
    retracted_output_tokens_total: int = 0
    transferring: int = 0
    """A decode worker's requests pulling their KV (SGLang's ``#transfer-req``)."""
    last_gen_throughput: float = 0.0
    ttft: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)
    inter_token: Histogram = field(default_factory=Histogram)

    @property
    def avg_spec_accept_length(self) -> float:
        return self.accepted_tokens_total / self.verify_ct_total if self.verify_ct_total else 0.0


class PrefixCache:
    """The prompts served lately, matched token by token (a radix cache's answer, not its memory)."""

    def __init__(self) -> None:
        self._prompts: deque[tuple[int, ...]] = deque(maxlen=_PREFIX_CACHE_ENTRIES)

    def match(self, tokens: list[int]) -> int:
        """How many leading ``tokens`` a cached prompt shares."""
        best = 0
        for prompt in self._prompts:
            n = 0
            for a, b in zip(prompt, tokens, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best

    def insert(self, prompt: list[int]) -> None:
        self._prompts.append(tuple(prompt))

    def clear(self) -> None:
        self._prompts.clear()
