"""SGLang's batch decisions over the KV pool: which waiting requests a prefill admits (and how much
of a long prompt), and which running requests a decode step retracts when the pool is full.

This follows the release's ``PrefillAdder`` (``schedule_policy.py``), ``Scheduler.
_get_new_batch_prefill_raw`` and ``update_running_batch`` (``scheduler.py``) and ``ScheduleBatch.
retract_decode`` (``schedule_batch.py``) with a page size of 1 and SGLang's default first-come
first-served policy, the numbers they use coming from ``sglang_world.scheduling``:

- a request is admitted only if its new tokens, the prefix it locks and the reservation for all
  its max new tokens fit what the pool has left after the running requests' reservations
  (``new_token_ratio`` x their remaining max new tokens);
- a prefill batch holds at most ``max_prefill_tokens`` new tokens and ``chunked_prefill_size``
  (when chunking is on): a longer prompt is prefilled one chunk per batch, and its first token
  comes with its last chunk;
- once admission stops for want of tokens or of running slots, the batch counts as full until a
  running request leaves it (finished, retracted or aborted);
- a decode step needs a free token per running request (more with speculative decoding): when
  the pool has fewer, the requests with the least output are retracted to the waiting queue, and
  ``new_token_ratio`` is raised to what the remaining ones need; otherwise it decays.

The emulator's prefix cache costs no pool tokens until a request locks a match; requests that
share a cached prefix each count it (SGLang counts a shared prefix once). Prompts are sent with
the prefix cache on, SGLang's default, so ``ignore_eos`` takes the same path as any request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING

from sglang_world.scheduling import SchedulingRules, TokenRatio

if TYPE_CHECKING:
    from sglang_emulator.pool_limits import PoolLimits
    from sglang_emulator.requests import Request

__all__ = ["BatchScheduler", "PrefillBatch", "Retraction"]


@dataclass
class PrefillBatch:
    """One prefill: each request with the tokens computed for it now; the request whose prompt
    continues in the next batch, if one was cut."""

    extends: list[tuple[Request, int]] = field(default_factory=list)
    chunked: Request | None = None
    new_tokens: int = 0
    cached_tokens: int = 0
    running: int = 0
    """Requests running when the batch was formed (for the log)."""
    token_usage: float = 0.0
    """The pool's usage before the batch took its tokens (for the log)."""


@dataclass(frozen=True)
class Retraction:
    """A decode step that found the pool full."""

    requests: list[Request]
    tokens_gained: int
    ratio_before: float
    ratio_after: float


class _Result(Enum):
    CONTINUE = auto()
    NO_TOKEN = auto()
    OTHER = auto()


class BatchScheduler:
    """The pool's bookkeeping and SGLang's admission and retraction rules over it.

    ``match_prefix(tokens)`` tells how many leading tokens the prefix cache already holds.
    """

    def __init__(
        self,
        limits: PoolLimits,
        rules: SchedulingRules,
        conservativeness: float,
        decode_buffer: int,
        speculative: bool,
        match_prefix: Callable[[list[int]], int],
    ) -> None:
        self.limits = limits
        self.rules = rules
        self.ratio = TokenRatio(rules, conservativeness)
        self.decode_buffer = decode_buffer
        """Free tokens each running request needs for one decode step (more when speculating)."""
        self.speculative = speculative
        """Speculative decoding retracts from the back of the batch, unsorted."""
        self._match_prefix = match_prefix
        self.used = 0
        """Tokens the pool holds for requests."""
        self.batch_is_full = False
        self.chunked: Request | None = None
        """The request whose prompt is being prefilled chunk by chunk."""

    @property
    def available(self) -> int:
        return self.limits.max_total_num_tokens - self.used

    def token_usage(self) -> float:
        return self.used / self.limits.max_total_num_tokens if self.limits.max_total_num_tokens else 0.0

    def clip_max_new_tokens(self, prompt_len: int, max_new_tokens: int) -> int:
        """What SGLang lets a request generate: no more than the pool and context leave."""
        return max(min(max_new_tokens, self.limits.max_req_len - prompt_len - 1), 0)

    def _reserve(self, request: Request) -> int:
        return min(max(request.max_new_tokens - request.completion_tokens, 0), self.rules.clip_max_new_tokens)

    # --- prefill ------------------------------------------------------------------------

    def form_prefill(
        self, waiting: list[Request], running: Sequence[Request], arrived_by: float
    ) -> PrefillBatch | None:
        """The next prefill batch from the requests of ``waiting`` that arrived by ``arrived_by``
        (the step's start: one that came later waits for the next step, however late the host
        let the scheduler run), first come first served; or None. Admitted requests are taken out
        of ``waiting``, their tokens from the pool."""
        arrived = [r for r in waiting if r.ready_s <= arrived_by]
        if (self.batch_is_full or not arrived) and self.chunked is None:
            return None
        slots = self.limits.max_running_requests - len(running)
        if slots <= 0:
            self.batch_is_full = True
            return None
        adder = _Adder(self, running)
        batch = PrefillBatch(running=len(running), token_usage=self.token_usage())
        if self.chunked is not None:
            self.chunked = adder.add_chunked(self.chunked, batch)
        for request in arrived:
            if len(batch.extends) >= slots:
                self.batch_is_full = True
            if self.batch_is_full:
                break
            result = adder.add(request, batch)
            if result is not _Result.CONTINUE:
                if result is _Result.NO_TOKEN:
                    self.batch_is_full = True
                break
        if not batch.extends:
            return None
        admitted = {id(request) for request, _ in batch.extends}
        waiting[:] = [r for r in waiting if id(r) not in admitted]
        if batch.chunked is not None:
            self.chunked = batch.chunked
        return batch

    # --- decode -------------------------------------------------------------------------

    def reserve_decode(self, running: list[Request]) -> Retraction | None:
        """Make room for one decode step of ``running`` (retracting the last requests from it when
        the pool is short), or let ``new_token_ratio`` decay one step when there is room."""
        if self.available >= len(running) * self.decode_buffer:
            self.ratio.decay_step()
            return None
        order = list(running)
        if not self.speculative:
            order.sort(key=lambda r: (r.completion_tokens, -len(r.prompt_ids)), reverse=True)
        before, ratio_before = self.available, self.ratio.current
        retracted: list[Request] = []
        while len(order) > 1 and (not retracted or self.available < len(order) * self.decode_buffer):
            request = order.pop()
            self.free(request)
            request.filled = 0
            retracted.append(request)
        kept = {id(r) for r in order}
        running[:] = [r for r in running if id(r) in kept]
        self.batch_is_full = False
        ratio = self.ratio.after_retract(
            sum(r.completion_tokens for r in running), sum(r.max_new_tokens for r in running), len(running)
        )
        return Retraction(retracted, self.available - before, ratio_before, ratio)

    # --- the pool -----------------------------------------------------------------------

    def allocate(self, request: Request, tokens: int) -> None:
        request.kv_tokens += tokens
        self.used += tokens

    def free(self, request: Request) -> None:
        """Give back what ``request`` holds (it finished, was aborted or retracted): a running
        request left the batch, so admission may try again."""
        if request.kv_tokens:
            self.used -= request.kv_tokens
            request.kv_tokens = 0
            self.batch_is_full = False


class _Adder:
    """One prefill batch's budget: SGLang's ``PrefillAdder`` with a page size of 1."""

    def __init__(self, scheduler: BatchScheduler, running: Sequence[Request]) -> None:
        self.s = scheduler
        ratio = scheduler.ratio.current
        self.total_offset = sum(scheduler._reserve(r) * ratio for r in running)
        self.cur_offset = 0.0
        self.rem_input = scheduler.limits.max_prefill_tokens
        self.rem_chunk = scheduler.limits.chunked_prefill_size

    @property
    def rem_total(self) -> float:
        return self.s.available - self.total_offset

    @property
    def cur_rem(self) -> float:
        return self.s.available - self.cur_offset

    def _budget_state(self) -> _Result:
        if self.rem_total <= 0 or self.cur_rem <= 0:
            return _Result.NO_TOKEN
        if self.rem_input <= 0 or (self.rem_chunk is not None and self.rem_chunk <= 0):
            return _Result.OTHER
        return _Result.CONTINUE

    def _take(self, batch: PrefillBatch, request: Request, prefix: int, extend: int, reserve: int) -> None:
        # The pool's tokens are taken as the batch forms, so the offsets count only reservations.
        batch.extends.append((request, extend))
        batch.new_tokens += extend
        batch.cached_tokens += prefix
        self.s.allocate(request, prefix + extend)
        request.filled += prefix + extend
        self.total_offset += reserve
        self.rem_input -= extend
        if self.rem_chunk is not None:
            self.rem_chunk -= extend

    def add_chunked(self, request: Request, batch: PrefillBatch) -> Request | None:
        """The next chunk of the request being prefilled; it again when more chunks remain."""
        assert self.rem_chunk is not None
        budget = min(self.rem_chunk, int(self.rem_total))
        if budget <= 0:
            # SGLang always schedules the chunk (its memory would leak otherwise); here it never
            # takes more than the pool has free.
            budget = min(self.rem_chunk, self.s.available)
        remaining = request.fill_len - request.filled
        extend = min(remaining, max(budget, 0))
        if extend <= 0:
            return request
        truncated = remaining > extend
        reserve = 0 if truncated else min(request.max_new_tokens, self.s.rules.clip_max_new_tokens)
        self._take(batch, request, 0, extend, reserve)
        return request if truncated else None

    def add(self, request: Request, batch: PrefillBatch) -> _Result:
        """SGLang's ``add_one_req`` for a request of the waiting queue."""
        request.fill_len = len(request.prompt_ids) + request.completion_tokens
        fill = request.prompt_ids + request.output_ids
        prefix = self.s._match_prefix(fill[: max(len(fill) - 1, 0)])
        extend = request.fill_len - prefix
        total = extend + self.s._reserve(request)
        # Locking a cached prefix takes its tokens out of what could be evicted.
        if total + prefix >= self.rem_total:
            return _Result.NO_TOKEN
        if extend >= self.rem_input and batch.extends:
            return _Result.OTHER
        request.cached_tokens = prefix if request.completion_tokens == 0 else request.cached_tokens
        reserve = min(request.max_new_tokens, self.s.rules.clip_max_new_tokens)
        if self.rem_chunk is None or extend <= self.rem_chunk:
            self._take(batch, request, prefix, extend, reserve)
        else:
            if self.rem_chunk <= 0:
                return _Result.OTHER
            self._take(batch, request, prefix, self.rem_chunk, 0)
            batch.chunked = request
        return self._budget_state()
