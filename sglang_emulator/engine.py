"""The scheduler: continuous batching that emits tokens when the performance model says.

One thread runs SGLang's loop: admit waiting requests up to the running limit (a prefill step
that yields each new request's first token), then decode steps (or draft+verify cycles) for
the whole running batch. Steps are timed against absolute deadlines, so sleeping jitter does
not accumulate into the emitted rate. Handlers read a request's chunks from its queue. A stalled
scheduler (``stall``) never finishes a step again, as one stuck in a collective that never returns.
"""

from __future__ import annotations

import itertools
import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang_emulator.metrics import Histogram
from sglang_emulator.performance import AcceptSampler, PerformanceModel
from sglang_emulator.tokenizer import GENERATED_WORDS

__all__ = ["Chunk", "Engine", "EngineStats", "Request"]

_PREFIX_CACHE_ENTRIES = 256
_MAX_CATCH_UP_S = 1.0


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
    last_gen_throughput: float = 0.0
    ttft: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)
    inter_token: Histogram = field(default_factory=Histogram)

    @property
    def avg_spec_accept_length(self) -> float:
        return self.accepted_tokens_total / self.verify_ct_total if self.verify_ct_total else 0.0


class Engine:
    """The batching loop; start it once, submit requests from any thread."""

    def __init__(
        self,
        model: PerformanceModel,
        max_running_requests: int,
        max_total_num_tokens: int,
        seed: int,
        log: logging.Logger,
        on_request_done: Callable[[Request], None] | None = None,
    ) -> None:
        self._model = model
        self._max_running = max_running_requests
        self._max_tokens = max_total_num_tokens
        self._seed = seed
        self._log = log
        self._on_done = on_request_done
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        self._inflight: set[int] = set()
        self._wake = threading.Condition()
        self._ordinal = itertools.count()
        self._prefixes: deque[tuple[int, ...]] = deque(maxlen=_PREFIX_CACHE_ENTRIES)
        self._stopped = False
        self._stalled = False
        self.stalled_unix_s = 0.0
        """When ``stall`` stopped the scheduler (wall clock): its last step, SGLang's last heartbeat."""
        self.stats = EngineStats()
        self._interval_tokens = 0
        self._interval_start = time.monotonic()
        self._steps = 0
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()

    def stall(self) -> None:
        """Stops making progress for good: the step under way never ends, no request is admitted or
        answered again; the thread stays alive, as a scheduler stuck in a collective is."""
        with self._wake:
            self._stalled = True
            self.stalled_unix_s = time.time()

    @property
    def stalled(self) -> bool:
        """Whether ``stall`` stopped the scheduler."""
        return self._stalled

    def _hold_while_stalled(self) -> None:
        if not self._stalled:
            return
        with self._wake:
            while self._stalled and not self._stopped:
                self._wake.wait()

    def submit(self, request: Request) -> None:
        """Queue ``request``; its chunks arrive on ``request.chunks``."""
        ordinal = next(self._ordinal)
        request.rng = random.Random(f"{self._seed}/{ordinal}")
        spec = self._model.config.speculative
        if spec is not None:
            rate = self._model.profile.performance.speculative.draft_token_accept_rate
            request.sampler = AcceptSampler(rate, spec.max_accept_length, request.rng.randrange(2**32))
        with self._wake:
            self._waiting.append(request)
            self._inflight.add(id(request))
            self.stats.requests_total += 1
            self.stats.queued = len(self._waiting)
            self._wake.notify()

    def flush_cache(self) -> bool:
        """Drop the prefix cache; refused (False) while requests run or wait, as in SGLang."""
        with self._wake:
            if self._inflight:
                return False
            self._prefixes.clear()
            return True

    def token_usage(self) -> float:
        used = sum(len(r.prompt_ids) + r.completion_tokens for r in self._running)
        return used / self._max_tokens if self._max_tokens else 0.0

    def _cached_prefix(self, prompt: list[int]) -> int:
        best = 0
        key = tuple(prompt)
        for prefix in self._prefixes:
            n = 0
            for a, b in zip(prefix, key, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        self._prefixes.append(key)
        # The last prompt token is always recomputed, as in a radix cache.
        return min(best, max(len(prompt) - 1, 0))

    def _loop(self) -> None:
        deadline = time.monotonic()
        while True:
            with self._wake:
                while not self._stopped and (self._stalled or not (self._running or self._waiting)):
                    self._wake.wait()
                    deadline = time.monotonic()
                if self._stopped:
                    return
                admitted: list[Request] = []
                while self._waiting and len(self._running) + len(admitted) < self._max_running:
                    admitted.append(self._waiting.popleft())
                self.stats.queued = len(self._waiting)
            self._running = self._without_aborted(self._running)
            if admitted:
                deadline = self._prefill(admitted, deadline)
            elif self._running:
                deadline = self._decode(deadline)

    def _sleep_until(self, deadline: float) -> float:
        now = time.monotonic()
        if deadline > now:
            time.sleep(deadline - now)
            return deadline
        # Behind because the machine's CPU was busy elsewhere (a GPU does not slow down with its host's
        # load): catch up, so the emitted rate stays the model's. A stall longer than a second (a
        # stopped process, a suspended machine) restarts the clock rather than bursting out of it.
        return now if now - deadline > _MAX_CATCH_UP_S else deadline

    def _prefill(self, admitted: list[Request], deadline: float) -> float:
        new_tokens = 0
        cached = 0
        for request in admitted:
            request.cached_tokens = self._cached_prefix(request.prompt_ids)
            new_tokens += len(request.prompt_ids) - request.cached_tokens
            cached += request.cached_tokens
        deadline = self._sleep_until(deadline + self._model.prefill_ms(new_tokens) / 1000)
        self._hold_while_stalled()
        self._log.info(
            "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
            "#running-req: %d, #queue-req: %d,",
            len(admitted),
            new_tokens,
            cached,
            self.token_usage(),
            len(self._running),
            self.stats.queued,
        )
        with self._wake:
            self.stats.prompt_tokens_total += sum(len(r.prompt_ids) for r in admitted)
            self.stats.cached_tokens_total += cached
        for request in admitted:
            self._emit(request, 1)
            if request.finished_s is None:
                self._running.append(request)
        self.stats.running = len(self._running)
        return deadline

    def _decode(self, deadline: float) -> float:
        batch = len(self._running)
        spec = self._model.config.speculative is not None
        step_ms = self._model.speculative_cycle_ms(batch) if spec else self._model.decode_step_ms(batch)
        deadline = self._sleep_until(deadline + step_ms / 1000)
        self._hold_while_stalled()
        for request in self._running:
            if request.aborted:
                continue
            count = request.sampler.next() if request.sampler is not None else 1
            if spec:
                request.spec_verify_ct += 1
                with self._wake:
                    self.stats.verify_ct_total += 1
                    self.stats.accepted_tokens_total += min(count, self._remaining(request))
            self._emit(request, count)
        self._running = self._without_aborted([r for r in self._running if r.finished_s is None])
        self.stats.running = len(self._running)
        self._steps += 1
        if self._steps % self._model.profile.performance.decode_log_interval == 0:
            self._log_decode(batch)
        return deadline

    def _without_aborted(self, requests: list[Request]) -> list[Request]:
        kept = []
        for request in requests:
            if request.aborted:
                with self._wake:
                    self._inflight.discard(id(request))
            else:
                kept.append(request)
        return kept

    def _remaining(self, request: Request) -> int:
        return request.max_new_tokens - request.completion_tokens

    def _emit(self, request: Request, count: int) -> None:
        count = min(count, self._remaining(request))
        assert request.rng is not None
        words = [request.rng.choice(GENERATED_WORDS) for _ in range(count)]
        vocab = self._model.profile.model.vocab_size
        ids = [(GENERATED_WORDS.index(w) * 7919 + 13) % vocab for w in words]
        text = "".join(" " + w for w in words)
        now = time.monotonic()
        request.output_ids.extend(ids)
        request.output_text += text
        if request.first_token_s is None:
            request.first_token_s = now
            self.stats.ttft.observe(now - request.created_s)
        elif request.last_chunk_s is not None:
            self.stats.inter_token.observe((now - request.last_chunk_s) / count)
        request.last_chunk_s = now
        finished = self._remaining(request) <= 0
        if finished:
            request.finished_s = now
            with self._wake:
                self._inflight.discard(id(request))
            self.stats.e2e.observe(now - request.created_s)
        self.stats.generation_tokens_total += count
        self._interval_tokens += count
        request.chunks.put(Chunk(ids, text, finished))
        if finished and self._on_done is not None:
            self._on_done(request)

    def _log_decode(self, batch: int) -> None:
        now = time.monotonic()
        elapsed = now - self._interval_start
        self.stats.last_gen_throughput = self._interval_tokens / elapsed if elapsed > 0 else 0.0
        self._interval_tokens = 0
        self._interval_start = now
        accept = ""
        if self._model.config.speculative is not None:
            accept = f"accept len: {self.stats.avg_spec_accept_length:.2f}, "
        self._log.info(
            "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, %scuda graph: %s, "
            "gen throughput (token/s): %.2f, #queue-req: %d,",
            batch,
            sum(len(r.prompt_ids) + r.completion_tokens for r in self._running),
            self.token_usage(),
            accept,
            not self._model.config.cuda_graph_disabled and batch <= self._model.config.cuda_graph_max_bs,
            self.stats.last_gen_throughput,
            self.stats.queued,
        )
