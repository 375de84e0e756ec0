"""The scheduler: continuous batching that emits tokens when the performance model says.

One thread runs SGLang's loop: a prefill batch when waiting requests fit the KV pool (which ones,
and how much of a long prompt, ``batching.py`` decides as SGLang does), yielding each finished
prompt's first token; otherwise one decode step (or draft+verify cycle) for the whole running
batch, after retracting requests when the pool cannot hold the step's tokens. Steps are timed
against absolute deadlines, so sleeping jitter does not accumulate into the emitted rate. Handlers
read a request's chunks from its queue. A stalled scheduler (``stall``) never finishes a step
again, as one stuck in a collective that never returns.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable

from sglang_emulator.batching import BatchScheduler, PrefillBatch
from sglang_emulator.performance import AcceptSampler, PerformanceModel
from sglang_emulator.pool_limits import PoolLimits
from sglang_emulator.requests import Chunk, EngineStats, PrefixCache, Request
from sglang_emulator.step_clock import sleep_until
from sglang_emulator.token_emitter import TokenEmitter
from sglang_world import input_too_long
from sglang_world.scheduling import SchedulingRules

__all__ = ["Chunk", "Engine", "EngineStats", "Request"]


class Engine(TokenEmitter):
    """The batching loop; start it once, submit requests from any thread."""

    def __init__(
        self,
        model: PerformanceModel,
        limits: PoolLimits,
        rules: SchedulingRules,
        seed: int,
        log: logging.Logger,
        on_request_done: Callable[[Request], None] | None = None,
        before_prefill: Callable[[int], None] | None = None,
    ) -> None:
        self._model = model
        self._before_prefill = before_prefill
        """Told each prefill forward's new tokens before it runs: the memory plan's check that its
        activations fit, which ends the process (as SGLang's out of memory does) when they do not."""
        self.limits = limits
        spec = model.config.speculative
        # SGLang keeps room for a verify pass's draft tree per request (decode_mem_cache_buf_multiplier).
        buffer = 1 if spec is None else spec.num_draft_tokens + spec.eagle_topk * spec.num_steps
        conservativeness = float(model.config.server_args["schedule_conservativeness"])
        self._prefixes = PrefixCache()
        self.scheduler = BatchScheduler(
            limits, rules, conservativeness, buffer, spec is not None, self._prefixes.match
        )
        self._seed = seed
        self._log = log
        self._on_done = on_request_done
        self.handoff_inflight: Callable[[], int] = lambda: 0
        """A prefill worker's rooms waiting for their decode worker (set by its server)."""
        self._waiting: list[Request] = []
        self._running: list[Request] = []
        self._inflight: set[int] = set()
        self._wake = threading.Condition()
        self._ordinal = itertools.count()
        self._stopped = False
        self._stalled = False
        self.stalled_unix_s = 0.0
        """When ``stall`` stopped the scheduler (wall clock): its last step, SGLang's last heartbeat."""
        self.stats = EngineStats()
        self._interval_tokens = 0
        self._interval_start = self._now()
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

    def input_problem(self, prompt_len: int) -> str | None:
        """SGLang's refusal of a prompt its pool or context cannot hold, or None."""
        limit = self.limits.max_req_input_len
        return None if prompt_len < limit else input_too_long(prompt_len, limit)

    def submit(self, request: Request) -> None:
        """Queue ``request``; its chunks arrive on ``request.chunks``. Its max new tokens are cut
        to what the pool and context leave after its prompt, as SGLang does."""
        ordinal = next(self._ordinal)
        request.rng = random.Random(f"{self._seed}/{ordinal}")
        request.max_new_tokens = self.scheduler.clip_max_new_tokens(
            len(request.prompt_ids), request.max_new_tokens
        )
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
        """Tokens the pool holds for requests, as a share of the pool (never above 1)."""
        return self.scheduler.token_usage()

    @property
    def _busy(self) -> bool:
        return bool(self._running or self._waiting or self.scheduler.chunked is not None)

    def _loop(self) -> None:
        deadline = time.monotonic()
        while True:
            with self._wake:
                while not self._stopped and (self._stalled or not self._busy):
                    self._wake.wait()
                if self._stopped:
                    return
                if self._waiting and not self._running and self.scheduler.chunked is None:
                    # An idle GPU starts on a request when it arrives, not when this thread is
                    # woken for it: the wake-up's delay is the host's, not the server's.
                    deadline = max(deadline, min(r.ready_s for r in self._waiting))
            stepped = self._step(deadline)
            if stepped is None:
                # Nothing fits and nothing runs (only aborted requests left): wait for news.
                with self._wake:
                    self._wake.wait(0.05)
                deadline = time.monotonic()
            else:
                deadline = stepped

    def _step(self, deadline: float) -> float | None:
        """One turn of SGLang's loop: a prefill batch if one forms, else a decode step; None when
        neither could run. Returns the step's deadline."""
        self._running = self._without_aborted(self._running)
        with self._wake:
            self._waiting = self._without_aborted(self._waiting)
            chunked = self.scheduler.chunked
            if chunked is not None and chunked.aborted:
                self._without_aborted([chunked])
                self.scheduler.chunked = None
            batch = self.scheduler.form_prefill(self._waiting, self._running, deadline)
            self.stats.queued = len(self._waiting)
        if batch is not None:
            deadline = self._prefill(batch, deadline)
        elif self._running:
            deadline = self._decode(deadline)
        else:
            return None
        if not self._busy:
            # SGLang's loop, finding nothing to run, re-inits its state (self_check_during_idle).
            self.scheduler.ratio.reset()
        return deadline

    def _sleep_until(self, deadline: float, precise: bool = False) -> float:
        """The wall clock's wait for a step (``step_clock``); a virtual engine keeps its own clock."""
        return sleep_until(deadline, precise)

    def _prefill(self, batch: PrefillBatch, deadline: float) -> float:
        # SGLang logs the batch as it forms it, before its tokens are computed; a decode worker's
        # requests come with their KV and form no prefill batch.
        mode = self._model.config.disaggregation_mode
        if mode != "decode":
            role = ""
            if mode == "prefill":
                rate = batch.new_tokens / max(self._model.prefill_ms(batch.new_tokens) / 1000, 1e-9)
                role = (
                    f"#prealloc-req: 0, #inflight-req: {self.handoff_inflight()}, "
                    f"input throughput (token/s): {rate:.2f}, "
                )
            self._log.info(
                "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
                "#running-req: %d, #queue-req: %d, %s",
                len(batch.extends),
                batch.new_tokens,
                batch.cached_tokens,
                batch.token_usage,
                batch.running,
                self.stats.queued,
                role,
            )
        if self._before_prefill is not None:
            self._before_prefill(batch.new_tokens)
        first_tokens = any(request is not self.scheduler.chunked for request, _ in batch.extends)
        # A decode worker's requests arrive with their KV: admitting them computes nothing.
        computed = batch.new_tokens - sum(tokens for request, tokens in batch.extends if request.prefilled)
        step_s = self._model.prefill_ms(computed) / 1000 if computed else 0.0
        deadline = self._sleep_until(deadline + step_s, precise=first_tokens)
        self._hold_while_stalled()
        with self._wake:
            self.stats.prompt_tokens_total += batch.new_tokens + batch.cached_tokens
            self.stats.cached_tokens_total += batch.cached_tokens
        for request, _ in batch.extends:
            if request is self.scheduler.chunked:
                continue  # more of its prompt to prefill: no token yet
            if request.completion_tokens == 0:
                self._prefixes.insert(request.prompt_ids)
            self._emit(request, 1)
            if request.finished_s is None:
                self._running.append(request)
        self.stats.running = len(self._running)
        return deadline

    def _decode(self, deadline: float) -> float:
        retraction = self.scheduler.reserve_decode(self._running)
        if retraction is not None:
            with self._wake:
                self._waiting.extend(retraction.requests)
                self.stats.queued = len(self._waiting)
                self.stats.retracted_requests_total += len(retraction.requests)
                self.stats.retracted_input_tokens_total += sum(len(r.prompt_ids) for r in retraction.requests)
                self.stats.retracted_output_tokens_total += sum(
                    r.completion_tokens for r in retraction.requests
                )
            self._log.warning(
                "KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_tokens_gained: %d, "
                "#new_token_ratio: %.4f -> %.4f",
                len(retraction.requests),
                retraction.tokens_gained,
                retraction.ratio_before,
                retraction.ratio_after,
            )
        batch = len(self._running)
        speculative = self._model.config.speculative
        spec = speculative is not None
        step_ms = self._model.speculative_cycle_ms(batch) if spec else self._model.decode_step_ms(batch)
        per_step = speculative.max_accept_length if speculative is not None else 1
        last_tokens = any(self._remaining(r) <= per_step for r in self._running)
        deadline = self._sleep_until(deadline + step_ms / 1000, precise=last_tokens)
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
                self.scheduler.free(request)
                with self._wake:
                    self._inflight.discard(id(request))
            else:
                kept.append(request)
        return kept
