"""A search-efficiency run: one strategy with one seed at one noise level on an emulated host, read
into its result (launches and GPU-hours to the optimum's noise band, the final pick at the budget),
and every run of a benchmark spread over a pool of processes."""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import optuna
from search_host import Host, StopRule
from search_space import Noise, Space
from search_strategies import BASELINES, RUNNERS

__all__ = ["STRATEGIES", "Budget", "RunResult", "run", "run_all"]

STRATEGIES = ("grid-file", *BASELINES, "ours", "ours-no-opening")


@dataclass(frozen=True)
class Budget:
    """The GPU time after which a run's final pick is read: a share of the kept candidates' GPU
    time, at most so many average launches (a user with thousands of candidates budgets trials,
    not a share of them)."""

    pct_of_kept: float
    launches: float

    def seconds(self, space: Space) -> float:
        return min(space.kept_gpu_s * self.pct_of_kept / 100, space.mean_trial_gpu_s * self.launches)

    def describe(self) -> str:
        share = f"{self.pct_of_kept:g} % of the kept candidates' GPU time"
        return f"{share}, at most {self.launches:g} average launches"


@dataclass(frozen=True)
class RunResult:
    """One strategy's run with one seed at one noise level."""

    strategy: str
    seed: int
    noise: str
    launches_to_band: int | None
    """None: the band was not found before the run stopped."""
    gpu_h_to_band: float | None
    pick: str | None
    """The candidate picked at the budget (best mean over its fully measured trials)."""
    pick_is_optimum: bool
    pick_in_band: bool
    launches: int
    failed_launches: int
    """Over the whole run."""
    failed_to_band: int
    """Failed launches among the launches to the band (all of them when it was not found)."""
    stopped_early: int
    """Trials stopped after their first repetitions, over the whole run."""
    gpu_h: float
    cpu_s: float
    """The run's CPU time in this process (the harness's own cost)."""


def _result(space: Space, noise: Noise, strategy: str, seed: int, host: Host, budget_s: float) -> RunResult:
    band = space.band(noise)
    to_band = next((e for e in host.events if e.full and e.candidate in band), None)
    pooled: dict[int, list[float]] = {}
    for event in host.events:
        if event.full and event.gpu_s <= budget_s:
            pooled.setdefault(event.candidate, []).extend(event.runs)
    best = max(pooled, key=lambda c: statistics.fmean(pooled[c]), default=None)
    picked = space.candidates[best] if best is not None else None
    failed = [e.launch for e in host.events if space.candidates[e.candidate].truth.failure]
    last = to_band.launch if to_band else host.launches
    return RunResult(
        strategy=strategy,
        seed=seed,
        noise=noise.name,
        launches_to_band=to_band.launch if to_band else None,
        gpu_h_to_band=to_band.gpu_s / 3600 if to_band else None,
        pick=picked.stack if picked else None,
        pick_is_optimum=picked is not None and space.is_optimum(picked),
        pick_in_band=picked is not None and picked.index in band,
        launches=host.launches,
        failed_launches=len(failed),
        failed_to_band=sum(1 for launch in failed if launch <= last),
        stopped_early=sum(
            1 for e in host.events if not e.full and space.candidates[e.candidate].value is not None
        ),
        gpu_h=host.gpu_s / 3600,
        cpu_s=0.0,
    )


def run(space: Space, noise: Noise, strategy: str, seed: int, budget: Budget) -> RunResult:
    """One strategy's run with one seed at one noise level."""
    started = time.process_time()
    budget_s = budget.seconds(space)
    host = Host(space, noise, seed)
    RUNNERS[strategy](space, seed, host, StopRule(space.band(noise), budget_s))
    result = _result(space, noise, strategy, seed, host, budget_s)
    return RunResult(**(asdict(result) | {"cpu_s": time.process_time() - started}))


_SPACES: dict[str, Space] = {}
"""The spaces the pool's workers run on (forked with them, so each is worked out once)."""


def _run_in_worker(job: tuple[str, Noise, str, int, Budget]) -> tuple[str, RunResult]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name, noise, strategy, seed, budget = job
    return name, run(_SPACES[name], noise, strategy, seed, budget)


def _cost(job: tuple[str, Noise, str, int, Budget]) -> int:
    """A rough order of the jobs' CPU cost, longest first, so the pool ends together."""
    name, _, strategy, _, _ = job
    return (0 if strategy in ("grid", "grid-file") else 2) * len(_SPACES[name].candidates)


def run_all(
    spaces: Sequence[Space],
    noises: dict[str, list[Noise]],
    strategies: Sequence[str],
    seeds: int,
    budget: Budget,
    jobs: int,
) -> dict[str, list[RunResult]]:
    """Every space, noise level, strategy and seed, on ``jobs`` processes; results per space."""
    _SPACES.clear()
    _SPACES.update({s.name: s for s in spaces})
    work = [
        (space.name, noise, strategy, seed, budget)
        for space in spaces
        for noise in noises[space.name]
        for strategy in strategies
        for seed in range(seeds)
    ]
    work.sort(key=_cost, reverse=True)
    done: dict[str, list[RunResult]] = {s.name: [] for s in spaces}
    results: Iterator[tuple[str, RunResult]]
    if jobs <= 1:
        results = map(_run_in_worker, work)
    else:
        pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))
        results = pool.map(_run_in_worker, work, chunksize=1)
    for count, (name, result) in enumerate(results, start=1):
        done[name].append(result)
        if count % max(len(work) // 20, 1) == 0:
            print(f"  {count} of {len(work)} runs done", file=sys.stderr, flush=True)
    if jobs > 1:
        pool.shutdown()
    for name in done:
        done[name].sort(key=lambda r: (r.noise, STRATEGIES.index(r.strategy), r.seed))
    return done
