"""What a campaign trial would cost and measure on the emulator, without launching it.

The search-efficiency benchmark runs thousands of trials; each is worked out here from the code
the emulator serves with, not from a copy of its numbers:

- startup: the emulator's own ``Boot`` (``sglang_emulator/startup.py``) walks SGLang's phases with
  the launch's resolved flags and memory plan (``launch.py``, ``memory.py``) and the profile's
  startup durations (``profile.py``); its waits are added to a virtual clock instead of slept, so a
  launch that fails (out of memory at load, KV pool empty, CUDA graphs that do not fit, a flag the
  release rejects) fails where the emulator would, after the time it would have taken;
- the benchmark (``virtual_benchmark``): the emulator's scheduler (``sglang_emulator/virtual.py``'s
  ``VirtualEngine``: the served ``Engine``'s admission over the KV pool, chunked prefill, retraction,
  prefill, decode and speculative steps, with the ``PerformanceModel`` of ``performance.py`` and the
  seeded accept-length sampler) runs in virtual time against a closed loop of clients shaped like
  the load generator's (warmup requests, then repetitions of ``requests_per_repetition`` requests
  over ``concurrency`` streams, each stream sending its next request when its last one finished). A
  repetition's tok/s is the load generator's: completion tokens over (last finish - first send).

The flags come from the project's renderer (the argv ``pulumi up`` would launch), so a trial here is
the stack the campaign would deploy.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass

from virtual_benchmark import Level, PrefillOutOfMemory, Workload, run_benchmark

from sglang_emulator.faults import Faults
from sglang_emulator.launch import LaunchConfig, resolve_launch
from sglang_emulator.memory import MemoryPlan, plan_memory, served_config
from sglang_emulator.pool_limits import PoolLimits, pool_limits
from sglang_emulator.profile import Profile
from sglang_emulator.profile_loading import load_profile
from sglang_emulator.startup import Boot
from sglang_emulator.startup_failures import StartupFailed
from sglang_flags import parser
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import FlagError
from sglang_world.scheduling import SchedulingRules, scheduling_rules

__all__ = ["EmulatedTrial", "LaunchStopped", "Level", "VirtualLaunch", "Workload", "emulate", "launch"]

_QUIET = logging.getLogger("search_efficiency.emulator")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
_QUIET.setLevel(logging.CRITICAL + 1)
_profile = functools.cache(load_profile)
_BENCHMARKS: dict[tuple[object, ...], tuple[float, tuple[Level, ...] | str]] = {}


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


class LaunchStopped(Exception):
    """A launch stopped before its server listened: the line it stops with, after how long."""

    def __init__(self, message: str, elapsed_s: float, *, at_start: bool) -> None:
        super().__init__(message)
        self.message = message
        self.elapsed_s = elapsed_s
        self.at_start = at_start
        """Stopped by a startup phase (loading, the KV pool, graph capture), not by its flags."""


@dataclass(frozen=True)
class VirtualLaunch:
    """A candidate's server up to HTTP in virtual time: its resolved launch, memory plan, process
    environment and the boot that walked its startup."""

    release: str
    profile: Profile
    config: LaunchConfig
    plan: MemoryPlan
    environ: dict[str, str]
    boot: _VirtualBoot

    def pool_limits(self) -> PoolLimits:
        return pool_limits(self.config, self.plan)

    def scheduling_rules(self) -> SchedulingRules:
        return scheduling_rules(self.release, self.environ)


def launch(spec: StackSpec) -> VirtualLaunch:
    """Launch ``spec``'s server as the emulator would, up to HTTP, in virtual time: its argv is the
    project's render, parsed by the release's own parser and resolved by the emulator. Raises
    LaunchStopped where the emulator would stop (a flag refused, a startup phase failed)."""
    release = spec.environment.sglang_release
    profile = _profile(spec.environment.emulator.profile)
    try:
        argv = render_argv(spec.launch_flags(), release)
    except FlagError as error:
        raise LaunchStopped(f"flags: {error}", 0.0, at_start=False) from None
    try:
        args = parser(release).parse_args(argv)
        if args.model_path is None:
            raise SystemExit(2)
    except SystemExit:
        # SGLang's parser rejects the command line before anything is loaded.
        raise LaunchStopped("bad flag", profile.startup.process_start_s, at_start=False) from None
    config = resolve_launch(release, args, profile, spec.environment.env, argv)
    if config.settings is not None and config.settings.refusal is not None:
        refusal = f"{config.settings.refusal_class}: {config.settings.refusal}"
        raise LaunchStopped(refusal, profile.startup.process_start_s, at_start=False)
    plan = plan_memory(config, profile)
    config = served_config(config, plan)
    # The candidate's own process environment, as its launch would have it (NCCL_ALGO, SGLANG_*),
    # never this process's.
    environ = dict(spec.environment.env)
    boot = _VirtualBoot(
        config, profile, plan, Faults(), 1.0, _QUIET, _QUIET, lambda phase: None, environ=environ
    )
    try:
        boot.run_until_http()
    except StartupFailed as failure:
        raise LaunchStopped(str(failure).splitlines()[0], boot.elapsed_s, at_start=True) from None
    return VirtualLaunch(release, profile, config, plan, environ, boot)


def emulate(spec: StackSpec, workload: Workload | None = None) -> EmulatedTrial:
    """Launch ``spec`` on the emulator in virtual time and run its benchmark."""
    gpus = _profile(spec.environment.emulator.profile).host.gpu_count
    try:
        launched = launch(spec)
    except LaunchStopped as stop:
        return EmulatedTrial(stop.elapsed_s, stop.message, gpus=gpus)
    config, profile, plan, boot = launched.config, launched.profile, launched.plan, launched.boot
    boot.start_http()
    boot.warm_up(lambda: None)
    # Launches that differ only where the scheduler does not look (port, memory fraction) measure
    # the same: run the benchmark once per scheduler-relevant configuration (its pool included).
    limits, rules = launched.pool_limits(), launched.scheduling_rules()
    unscheduled = dataclasses.replace(
        config,
        server_args={},
        mem_fraction_static=None,
        port=0,
        launch=dataclasses.replace(config.launch, mem_fraction_static=None),
        settings=None,
    )
    key = (
        repr(unscheduled),
        profile.source,
        limits,
        rules,
        config.server_args.get("schedule_conservativeness"),
        workload or Workload.of(spec),
        plan.prefill_tokens_that_fit,
    )
    if key not in _BENCHMARKS:
        try:
            _BENCHMARKS[key] = run_benchmark(config, profile, limits, rules, key[5], plan)
        except PrefillOutOfMemory as error:
            return EmulatedTrial(boot.elapsed_s, str(error), gpus=gpus)
    warmup_s, levels = _BENCHMARKS[key]
    if isinstance(levels, str):
        # The load generator's first request is refused: the trial fails once the server is up.
        return EmulatedTrial(boot.elapsed_s, f"benchmark: {levels}", gpus=gpus)
    return EmulatedTrial(boot.elapsed_s + warmup_s, None, levels, gpus)
