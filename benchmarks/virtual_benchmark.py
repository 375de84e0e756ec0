"""A trial's benchmark on the emulator's scheduler, in virtual time.

The emulator's scheduler (``sglang_emulator/virtual.py``'s ``VirtualEngine``: the served
``Engine``'s admission over the KV pool, chunked prefill, retraction, prefill, decode and
speculative steps, with the ``PerformanceModel`` of ``performance.py`` and the seeded accept-length
sampler) runs against a closed loop of clients shaped like the load generator's (warmup requests,
then repetitions of ``requests_per_repetition`` requests over ``concurrency`` streams, each stream
sending its next request when its last one finished). A repetition's tok/s is the load
generator's: completion tokens over (last finish - first send). ``emulated_trials`` launches the
server this runs on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sglang_emulator.engine import Request
from sglang_emulator.launch import LaunchConfig
from sglang_emulator.memory import MemoryPlan
from sglang_emulator.metrics import Histogram
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.pool_limits import PoolLimits
from sglang_emulator.profile import Profile
from sglang_emulator.virtual import VirtualEngine
from sglang_stacks.config.spec import StackSpec
from sglang_world.scheduling import SchedulingRules

__all__ = [
    "ClosedLoop",
    "Level",
    "NotifyingEngine",
    "PrefillOutOfMemory",
    "Workload",
    "prefill_guard",
    "run_benchmark",
]


@dataclass(frozen=True)
class Level:
    """One load level of a trial's benchmark, noise-free."""

    concurrency: int
    tok_s_runs: tuple[float, ...]
    """Each repetition's tok/s, as the load generator computes it."""
    repetition_s: tuple[float, ...]
    """Each repetition's duration."""
    warmup_s: float
    """The level's warmup requests."""

    @property
    def tok_s_mean(self) -> float:
        return sum(self.tok_s_runs) / len(self.tok_s_runs)


class _Unobserved(Histogram):
    """A latency histogram nobody reads: the benchmark times requests by their finish, and an
    observation per emitted token is a fifth of a benchmark's CPU time."""

    def observe(self, value_s: float) -> None:
        pass


class PrefillOutOfMemory(Exception):
    """A prefill forward's activations did not fit: the emulated server's scheduler died of it."""


def prefill_guard(plan: MemoryPlan) -> Callable[[int], None]:
    """The served emulator's check before each prefill forward (``MemoryPlan.prefill_failure``),
    raising instead of ending the process."""

    def check(tokens: int) -> None:
        failure = plan.prefill_failure(tokens)
        if failure is not None:
            raise PrefillOutOfMemory(failure)

    return check


class NotifyingEngine(VirtualEngine):
    """The virtual scheduler telling its listeners of every finished request."""

    def __init__(
        self,
        config: LaunchConfig,
        profile: Profile,
        limits: PoolLimits,
        rules: SchedulingRules,
        before_prefill: Callable[[int], None] | None = None,
    ) -> None:
        model = PerformanceModel(config, profile)
        super().__init__(model, limits, rules, config.random_seed, self._done, before_prefill=before_prefill)
        self.listeners: list[Callable[[Request], None]] = []
        self.stats.ttft = _Unobserved()
        self.stats.inter_token = _Unobserved()

    def _done(self, request: Request) -> None:
        for listener in list(self.listeners):
            listener(request)


@dataclass
class ClosedLoop:
    """``streams`` clients sending ``total`` requests, each the next when its last one finished."""

    engine: NotifyingEngine
    input_len: int
    output_len: int
    total: int
    streams: int
    prompt_seed: int
    sent: dict[str, float] = field(default_factory=dict)
    finished_s: dict[str, float] = field(default_factory=dict)
    _left: int = 0

    def run(self) -> tuple[float, float]:
        """Send everything and run it out; (first send, last finish)."""
        self._left = self.total
        self.engine.listeners.append(self.finished)
        start = self.engine.now_s
        for _ in range(min(self.streams, self.total)):
            self._send(start)
        self.engine.advance()
        self.engine.listeners.remove(self.finished)
        return start, max(self.finished_s.values())

    def _send(self, at_s: float) -> None:
        self._left -= 1
        number = self.prompt_seed + len(self.sent)
        rid = f"r{number}"
        # Fresh prompts, as the load generator's: no prefix shared with an earlier request.
        prompt = [number * 7919 + 1, *range(2, self.input_len + 1)]
        self.sent[rid] = at_s
        self.engine.submit(Request(rid=rid, prompt_ids=prompt, max_new_tokens=self.output_len))

    def finished(self, request: Request) -> None:
        if request.rid not in self.sent:
            return
        self.finished_s[request.rid] = self.engine.now_s
        if self._left > 0:
            self._send(self.engine.now_s)


@dataclass(frozen=True)
class Workload:
    """The parts of a benchmark section the emulated benchmark needs."""

    input_len: int
    output_len: int
    concurrency: tuple[int, ...]
    warmup_requests: int
    repetitions: int
    requests_per_repetition: int

    @classmethod
    def of(cls, spec: StackSpec) -> Workload:
        bench = spec.benchmark
        return cls(
            bench.input_len,
            bench.output_len,
            tuple(bench.concurrency),
            bench.warmup_requests,
            bench.repetitions,
            bench.requests_per_repetition,
        )


def run_benchmark(
    config: LaunchConfig,
    profile: Profile,
    limits: PoolLimits,
    rules: SchedulingRules,
    workload: Workload,
    plan: MemoryPlan,
) -> tuple[float, tuple[Level, ...] | str]:
    """The server's warmup request's time, then each level of the load generator's run, or the
    server's refusal of the workload's prompts (longer than its pool or context can hold); raises
    PrefillOutOfMemory when a prefill of the run does not fit."""
    engine = NotifyingEngine(config, profile, limits, rules, prefill_guard(plan))
    refused = engine.input_problem(workload.input_len)
    if refused is not None:
        return 0.0, refused
    # The server's own warmup request (sglang_emulator.serve._warmup_request) comes first: it
    # takes the first request ordinal, whose seed the accept-length sampler uses.
    engine.submit(Request(rid="warmup", prompt_ids=[1, 2, 3, 4, 5, 6], max_new_tokens=8))
    engine.advance()
    server_warmup_s = engine.now_s
    levels = []
    sent = 0
    for concurrency in workload.concurrency:
        start = engine.now_s
        if workload.warmup_requests:
            warm = ClosedLoop(
                engine, workload.input_len, workload.output_len, workload.warmup_requests, concurrency, sent
            )
            warm.run()
            sent += workload.warmup_requests
        warmup_s = engine.now_s - start
        runs, durations = [], []
        for _ in range(workload.repetitions):
            loop = ClosedLoop(
                engine,
                workload.input_len,
                workload.output_len,
                workload.requests_per_repetition,
                concurrency,
                sent,
            )
            first, last = loop.run()
            sent += workload.requests_per_repetition
            durations.append(last - first)
            runs.append(workload.requests_per_repetition * workload.output_len / (last - first))
        levels.append(Level(concurrency, tuple(runs), tuple(durations), warmup_s))
    return server_warmup_s, tuple(levels)
