"""What a campaign trial would cost and measure on the emulator, without launching it.

The search-efficiency benchmark runs thousands of trials; each is worked out here from the code
the emulator serves with, not from a copy of its numbers:

- startup: the emulator's own ``Boot`` (``sglang_emulator/startup.py``) walks SGLang's phases with
  the launch's resolved flags and memory plan (``launch.py``, ``memory.py``) and the profile's
  startup durations (``profile.py``); its waits are added to a virtual clock instead of slept, so a
  launch that fails (out of memory at load, KV pool empty, CUDA graphs that do not fit, a flag the
  release rejects) fails where the emulator would, after the time it would have taken;
- the benchmark: the emulator's scheduler (``sglang_emulator/engine.py``'s ``Engine``, its prefill,
  decode and speculative steps, with the ``PerformanceModel`` of ``performance.py`` and the seeded
  accept-length sampler) runs in virtual time against a closed loop of clients shaped like the load
  generator's (warmup requests, then repetitions of ``requests_per_repetition`` requests over
  ``concurrency`` streams, each stream sending its next request when its last one finished). A
  repetition's tok/s is the load generator's: completion tokens over (last finish - first send).

The flags come from the project's renderer (the argv ``pulumi up`` would launch), so a trial here is
the stack the campaign would deploy.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass, field

from sglang_emulator.engine import Engine, Request
from sglang_emulator.faults import Faults
from sglang_emulator.launch import LaunchConfig, resolve_launch
from sglang_emulator.memory import plan_memory
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.profile import Profile, load_profile
from sglang_emulator.startup import Boot, StartupFailed
from sglang_flags import build_parser
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import FlagError

__all__ = ["EmulatedTrial", "Level", "emulate"]

_QUIET = logging.getLogger("search_efficiency.emulator")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
_QUIET.setLevel(logging.CRITICAL + 1)
_profile = functools.cache(load_profile)
# sglang_emulator.launch.parse_launch_flags builds the release's parser (80 ms) on every call; the
# emulator parses once per process, this benchmark thousands of times, so it keeps one per release.
_parser = functools.cache(build_parser)
_BENCHMARKS: dict[tuple[object, ...], tuple[float, tuple[Level, ...]]] = {}


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


@dataclass(frozen=True)
class EmulatedTrial:
    """One candidate launched on the emulator: how far it got, how long that took, what it measured."""

    startup_s: float
    """From process start to ready, or to the failure."""
    failure: str | None
    """None when the server came up; else the error line the emulator prints (out of memory, ...)."""
    levels: tuple[Level, ...] = ()
    """The benchmark's levels, in run order (empty for a failed launch)."""
    gpus: int = 8
    """GPUs the trial holds (the host's, claimed whole)."""

    @property
    def benchmark_s(self) -> float:
        return sum(level.warmup_s + sum(level.repetition_s) for level in self.levels)

    @property
    def host_s(self) -> float:
        """The host's time for the whole trial: startup and benchmark."""
        return self.startup_s + self.benchmark_s

    def level(self, concurrency: int) -> Level:
        return next(level for level in self.levels if level.concurrency == concurrency)


class _VirtualBoot(Boot):
    """The emulator's startup with its waits added to a clock instead of slept."""

    elapsed_s: float = 0.0

    def _wait(self, seconds: float) -> None:
        self.elapsed_s += seconds


class _VirtualEngine(Engine):
    """The emulator's scheduler, stepped in virtual time by ``run``: the loop of ``Engine._loop``
    without its thread, each step's deadline taken as reached."""

    def __init__(self, model: PerformanceModel, max_running: int, max_tokens: int, seed: int) -> None:
        super().__init__(model, max_running, max_tokens, seed, _QUIET)
        self.now_s = 0.0
        self._finished: dict[str, float] = {}
        self._on_finish: list[_ClosedLoop] = []

    def _sleep_until(self, deadline: float) -> float:
        self.now_s = deadline
        return deadline

    def _done(self, request: Request) -> None:
        self._finished[request.rid] = self.now_s
        for loop in self._on_finish:
            loop.finished(request.rid, self.now_s)

    def _emit(self, request: Request, count: int) -> None:
        # Engine._emit's bookkeeping without the generated words and latency histograms, which
        # nothing here reads: the request's tokens, its finish, and the done callback.
        count = min(count, self._remaining(request))
        request.output_ids.extend([0] * count)
        if request.first_token_s is None:
            request.first_token_s = self.now_s
        if self._remaining(request) <= 0:
            request.finished_s = self.now_s
            self._inflight.discard(id(request))
            self._done(request)

    def finished_at(self, rid: str) -> float:
        return self._finished[rid]

    def run(self) -> None:
        """Step until nothing waits or runs (what ``Engine._loop`` does between idle waits)."""
        deadline = self.now_s
        while self._waiting or self._running:
            admitted: list[Request] = []
            while self._waiting and len(self._running) + len(admitted) < self._max_running:
                admitted.append(self._waiting.popleft())
            self._running = self._without_aborted(self._running)
            if admitted:
                deadline = self._prefill(admitted, deadline)
            elif self._running:
                deadline = self._decode(deadline)


@dataclass
class _ClosedLoop:
    """``streams`` clients sending ``total`` requests, each the next when its last one finished."""

    engine: _VirtualEngine
    input_len: int
    output_len: int
    total: int
    streams: int
    prompt_seed: int
    sent: dict[str, float] = field(default_factory=dict)
    _left: int = 0

    def run(self) -> tuple[float, float]:
        """Send everything and run it out; (first send, last finish)."""
        self._left = self.total
        self.engine._on_finish.append(self)
        start = self.engine.now_s
        for _ in range(min(self.streams, self.total)):
            self._send(start)
        self.engine.run()
        self.engine._on_finish.remove(self)
        return start, max(self.engine.finished_at(rid) for rid in self.sent)

    def _send(self, at_s: float) -> None:
        self._left -= 1
        number = self.prompt_seed + len(self.sent)
        rid = f"r{number}"
        # Fresh prompts, as the load generator's: no prefix shared with an earlier request.
        prompt = [number * 7919 + 1, *range(2, self.input_len + 1)]
        self.sent[rid] = at_s
        self.engine.submit(Request(rid=rid, prompt_ids=prompt, max_new_tokens=self.output_len))

    def finished(self, rid: str, at_s: float) -> None:
        if rid in self.sent and self._left > 0:
            self._send(at_s)


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


def _benchmark(
    config: LaunchConfig, profile: Profile, max_running: int, tokens: int, workload: Workload
) -> tuple[float, tuple[Level, ...]]:
    """The server's warmup request's time, then each level of the load generator's run."""
    engine = _VirtualEngine(PerformanceModel(config, profile), max_running, tokens, config.random_seed)
    # The server's own warmup request (sglang_emulator.__main__._warmup_request) comes first: it
    # takes the first request ordinal, whose seed the accept-length sampler uses.
    engine.submit(Request(rid="warmup", prompt_ids=[1, 2, 3, 4, 5, 6], max_new_tokens=8))
    engine.run()
    server_warmup_s = engine.now_s
    levels = []
    sent = 0
    for concurrency in workload.concurrency:
        start = engine.now_s
        if workload.warmup_requests:
            warm = _ClosedLoop(
                engine, workload.input_len, workload.output_len, workload.warmup_requests, concurrency, sent
            )
            warm.run()
            sent += workload.warmup_requests
        warmup_s = engine.now_s - start
        runs, durations = [], []
        for _ in range(workload.repetitions):
            loop = _ClosedLoop(
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


def emulate(spec: StackSpec, workload: Workload | None = None) -> EmulatedTrial:
    """Launch ``spec`` on the emulator in virtual time and run its benchmark."""
    release = spec.environment.sglang_release
    profile = _profile(spec.environment.emulator.profile)
    gpus = profile.host.gpu_count
    try:
        argv = render_argv(spec.launch_flags(), release)
    except FlagError as error:
        return EmulatedTrial(0.0, f"flags: {error}", gpus=gpus)
    try:
        args = _parser(release).parse_args(argv)
        if args.model_path is None:
            raise SystemExit(2)
    except SystemExit:
        # SGLang's parser rejects the command line before anything is loaded.
        return EmulatedTrial(profile.startup.process_start_s, "bad flag", gpus=gpus)
    config = resolve_launch(release, args, profile)
    plan = plan_memory(config, profile)
    boot = _VirtualBoot(config, profile, plan, Faults(), 1.0, _QUIET, _QUIET, lambda phase: None)
    try:
        boot.run_until_http()
    except StartupFailed as failure:
        return EmulatedTrial(boot.elapsed_s, str(failure).splitlines()[0], gpus=gpus)
    boot.start_http()
    boot.warm_up(lambda: None)
    # Launches that differ only where the scheduler does not look (port, memory fraction, KV size)
    # measure the same: run the benchmark once per scheduler-relevant configuration.
    key = (
        repr(dataclasses.replace(config, server_args={}, mem_fraction_static=None, port=0)),
        profile.source,
        plan.max_running_requests,
        workload or Workload.of(spec),
    )
    if key not in _BENCHMARKS:
        _BENCHMARKS[key] = _benchmark(
            config, profile, plan.max_running_requests, plan.max_total_num_tokens, key[3]
        )
    warmup_s, levels = _BENCHMARKS[key]
    return EmulatedTrial(boot.elapsed_s + warmup_s, None, levels, gpus)
