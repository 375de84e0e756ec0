"""What a scheduler step hands out: each request's generated tokens (timed into the stats, queued as
a chunk, a finished request let go) and the decode log's generation throughput."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sglang_emulator.batching import BatchScheduler
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.requests import Chunk, EngineStats, Request
from sglang_emulator.tokenizer import GENERATED_WORDS

__all__ = ["TokenEmitter"]


class TokenEmitter:
    """``Engine``'s token output, its base class: the engine sets the state annotated here."""

    _model: PerformanceModel
    scheduler: BatchScheduler
    stats: EngineStats
    _log: logging.Logger
    _wake: threading.Condition
    _inflight: set[int]
    _on_done: Callable[[Request], None] | None
    _interval_tokens: int
    _interval_start: float

    def _remaining(self, request: Request) -> int:
        return request.max_new_tokens - request.completion_tokens

    def _now(self) -> float:
        return time.monotonic()

    def _generate(self, request: Request, count: int) -> tuple[list[int], str]:
        """The next ``count`` token ids and their text, seeded per request."""
        assert request.rng is not None
        words = [request.rng.choice(GENERATED_WORDS) for _ in range(count)]
        vocab = self._model.profile.model.vocab_size
        ids = [(GENERATED_WORDS.index(w) * 7919 + 13) % vocab for w in words]
        return ids, "".join(" " + w for w in words)

    def _emit(self, request: Request, count: int) -> None:
        count = min(count, self._remaining(request))
        ids, text = self._generate(request, count)
        now = self._now()
        request.output_ids.extend(ids)
        request.output_text += text
        self.scheduler.allocate(request, count)
        if request.first_token_s is None:
            request.first_token_s = now
            self.stats.ttft.observe(now - request.created_s)
        elif request.last_chunk_s is not None:
            self.stats.inter_token.observe((now - request.last_chunk_s) / max(count, 1))
        request.last_chunk_s = now
        finished = self._remaining(request) <= 0
        if finished:
            request.finished_s = now
            self.scheduler.free(request)
            with self._wake:
                self._inflight.discard(id(request))
            self.stats.e2e.observe(now - request.created_s)
        self.stats.generation_tokens_total += count
        self._interval_tokens += count
        self._deliver(request, Chunk(ids, text, finished))
        if finished and request.on_finished is not None:
            request.on_finished(request)
        if finished and self._on_done is not None:
            self._on_done(request)

    def _deliver(self, request: Request, chunk: Chunk) -> None:
        request.chunks.put(chunk)

    def _log_decode(self, batch: int) -> None:
        now = self._now()
        elapsed = now - self._interval_start
        self.stats.last_gen_throughput = self._interval_tokens / elapsed if elapsed > 0 else 0.0
        self._interval_tokens = 0
        self._interval_start = now
        accept = ""
        if self._model.config.speculative is not None:
            accept = f"accept len: {self.stats.avg_spec_accept_length:.2f}, "
        if self._model.config.disaggregation_mode == "decode":
            accept += (
                f"pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: {self.stats.transferring}, "
                "#retracted-req: 0, "
            )
        self._log.info(
            "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, %scuda graph: %s, "
            "gen throughput (token/s): %.2f, #queue-req: %d, ",
            batch,
            self.scheduler.used,
            self.scheduler.token_usage(),
            accept,
            not self._model.config.cuda_graph_disabled and batch <= self._model.config.cuda_graph_max_bs,
            self.stats.last_gen_throughput,
            self.stats.queued,
        )
