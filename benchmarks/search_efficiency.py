"""GPU time until a campaign's search finds the best configuration: grid, random, plain TPE and ours.

For each space (the seeds' campaign, ``campaigns/seeds.yaml``, and a large one,
``benchmarks/search-large.yaml``) every candidate is planned by the project's own planner
(``sglang_stacks.campaign.plan``: preflight and the memory planner) and worked out on the emulator
in virtual time (``benchmarks/emulated_trials.py``: the emulator's own startup, memory plan and
scheduler), which gives each candidate its noise-free tok/s per repetition, its startup and benchmark
durations, and for a launch that fails, where and after how long. A trial drawn by a strategy
measures those repetitions times ``1 + CV x N(0, 1)``, CV being the coefficient of variation
measured on real emulator trials (``NOISE_CV`` below), and costs the host's GPUs for its startup
(to ready, or to the failure) and its benchmark.

The exhaustive optimum is the best noise-free mean of every candidate that starts. Its noise band:
candidates within ``t(0.975, 2n - 2) x sqrt(2 / n) x CV`` of it (n: the workload's repetitions),
the difference Welch's test on two such trials calls significant only half the time.

Strategies, each run with ``--seeds`` seeds:

- ``grid``: the kept candidates in file order, every repetition (today's ``sweep run``);
- ``random``: the kept candidates in a random order;
- ``tpe``: plain Optuna TPE (default settings) over the axes as categorical parameters, every
  suggestion launched (no preflight), failures told as failed (what auto-tune-vllm does); a
  suggestion it already measured is told that value again at no cost;
- ``ours``: ``sweep run`` itself: the ``Sweep`` of ``sglang_stacks.campaign.sweep`` on an in-memory
  study of the campaign with ``search.strategy: tpe`` and early stop after 2 repetitions, its trial
  runner's Pulumi deploy replaced by the emulated trial (``EmulatedTrials``).

Per strategy and seed: launches and GPU-hours until the first fully measured trial of a candidate in
the band, and the final pick (the best measured mean once ``--budget-pct`` of the kept candidates'
GPU time is spent; grid's after its whole sweep) and whether it is an optimum (the best noise-free
mean) or in its band. GPU-hours are the host's 8 GPUs times its hours. A run stops once it spent the
kept candidates' GPU time, ran out of candidates, or both found the band and reached the budget.

Run: ``python benchmarks/search_efficiency.py [--seeds 20] [--quick] [--json results.json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulated_trials import EmulatedTrial, emulate

from sglang_stacks.campaign.model import CampaignSpec, load_campaign
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.campaign.model_search import EarlyStopSpec, SearchSpec
from sglang_stacks.campaign.plan import Plan, PlanRow, make_plan
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.sweep import Sweep
from sglang_stacks.campaign.trial import TrialFailure
from sglang_stacks.hostops.server_failure import classify_failure
from sglang_stacks.results.stats import BenchmarkResult, ci95, stdev

ROOT = Path(__file__).resolve().parent.parent

NOISE_CV = {"seeds": 0.00099, "large": 0.0024}
"""Coefficient of variation of a repetition's tok/s on the emulator, per space: the pooled standard
deviation over the mean of the repetitions within a trial, measured by ``benchmarks/emulator_noise.py``
(the real emulator over HTTP, the project's load generator, 3 trials of a fresh server each) on
2026-12-01 on the 2-core development machine, shared with other test suites (load average about 10):

- seeds: ``--stack baseline-bs128`` with its workload (concurrency 1, 5 repetitions of 2 requests,
  1024 in / 512 out): 87.92 tok/s, CV 0.099 % within a trial, 0.060 % across the trials' means;
- large: ``--stack baseline --campaign benchmarks/search-large.yaml`` (concurrency 8, 4 repetitions
  of 8 requests, 1024 in / 256 out): 480.6 tok/s, CV 0.240 % within a trial, 0.220 % across."""

SPACES = {"seeds": ROOT / "campaigns" / "seeds.yaml", "large": ROOT / "benchmarks" / "search-large.yaml"}
STRATEGIES = ("grid", "random", "tpe", "ours")
TARGETS = {"median_pct_of_kept": 15.0, "p90_pct_of_kept": 30.0, "median_pct_of_tpe": 60.0}
"""Issue 24's targets for ours: GPU time to the band as a share of the kept candidates' (median,
90th percentile) and of plain TPE's (median)."""


@dataclass(frozen=True)
class Candidate:
    """One candidate of a space: its plan verdict and what the emulator makes of it."""

    index: int
    stack: str
    labels: tuple[str, ...]
    kept: bool
    truth: EmulatedTrial
    value: float | None
    """Noise-free mean of the objective's level; None when the launch fails."""


@dataclass(frozen=True)
class Space:
    """A campaign's candidates, worked out, with the optimum and its band."""

    name: str
    plan: Plan
    candidates: tuple[Candidate, ...]
    cv: float

    @property
    def campaign(self) -> CampaignSpec:
        return self.plan.campaign

    @property
    def concurrency(self) -> int:
        """The load level the objective reads."""
        concurrency = self.campaign.goals[0].level.concurrency
        assert concurrency is not None, "the benchmark's spaces read a closed-loop level"
        return concurrency

    @functools.cached_property
    def rows(self) -> dict[str, PlanRow]:
        """Plan rows by candidate digest."""
        return {row.candidate.digest: row for row in self.plan.rows}

    @functools.cached_property
    def by_stack(self) -> dict[str, Candidate]:
        return {c.stack: c for c in self.candidates}

    @functools.cached_property
    def kept(self) -> list[Candidate]:
        return [c for c in self.candidates if c.kept]

    @functools.cached_property
    def optimum(self) -> float:
        return max(c.value for c in self.candidates if c.value is not None)

    @functools.cached_property
    def band_fraction(self) -> float:
        reps = self.repetitions
        return float(stats.t.ppf(0.975, 2 * reps - 2)) * math.sqrt(2 / reps) * self.cv

    @functools.cached_property
    def band(self) -> frozenset[int]:
        """Indices of the candidates in the optimum's noise band."""
        low = self.optimum * (1 - self.band_fraction)
        return frozenset(c.index for c in self.candidates if c.value is not None and c.value >= low)

    @property
    def repetitions(self) -> int:
        workload = self.campaign.workload
        assert workload is not None, "the benchmark's spaces declare their workload"
        return workload.repetitions

    def in_band(self, candidate: Candidate) -> bool:
        return candidate.index in self.band

    def is_optimum(self, candidate: Candidate) -> bool:
        return candidate.value is not None and candidate.value >= self.optimum * (1 - 1e-9)

    @functools.cached_property
    def kept_gpu_s(self) -> float:
        return sum(_gpu_s(c.truth.host_s, c.truth) for c in self.kept)

    def by_labels(self) -> dict[tuple[str, ...], Candidate]:
        return {c.labels: c for c in self.candidates}


def _gpu_s(host_s: float, truth: EmulatedTrial) -> float:
    return host_s * truth.gpus


def load_space(name: str, path: Path, cv: float) -> Space:
    """Plan ``path`` with the project's planner and work every candidate out on the emulator."""
    campaign = load_campaign(path)
    plan = make_plan(path.stem, campaign, ROOT / "stacks")
    candidates = []
    for index, row in enumerate(plan.rows):
        if row.spec is None:
            raise SystemExit(f"{name}: candidate {row.stack} is not a valid stack: {row.reasons}")
        truth = emulate(row.spec)
        labels = tuple(row.candidate.labels.values())
        candidates.append(Candidate(index, row.stack, labels, row.verdict == "kept", truth, None))
    space = Space(name, plan, (), cv)
    level = space.concurrency
    return Space(
        name,
        plan,
        tuple(
            dataclasses.replace(c, value=None if c.truth.failure else c.truth.level(level).tok_s_mean)
            for c in candidates
        ),
        cv,
    )


# --- one run: the host that launches a strategy's trials and keeps the account ---


@dataclass
class Measured:
    """A trial's outcome as a strategy sees it."""

    candidate: Candidate
    runs: list[float]
    """Measured tok/s per repetition (noisy); empty for a failed launch."""
    failure: str | None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.runs)


@dataclass
class Event:
    """One launch, as the account records it."""

    launch: int
    gpu_s: float
    """Cumulative GPU seconds once this trial ended."""
    candidate: int
    full: bool
    """Measured in every repetition (not failed, not stopped early)."""
    mean: float | None


@dataclass
class Host:
    """Launches trials for one strategy's run: noisy measurements, GPU time, the event log."""

    space: Space
    rng: random.Random
    gpu_s: float = 0.0
    launches: int = 0
    events: list[Event] = field(default_factory=list)
    _cap_s: float = 0.0

    def __post_init__(self) -> None:
        self._cap_s = self.space.kept_gpu_s

    @property
    def exhausted(self) -> bool:
        """The run has spent the kept candidates' whole GPU time."""
        return self.gpu_s >= self._cap_s

    def launch(self, candidate: Candidate) -> Trial:
        """Start ``candidate``'s server; its startup (or the failure) is paid now."""
        self.launches += 1
        self.gpu_s += _gpu_s(candidate.truth.startup_s, candidate.truth)
        return Trial(self, candidate)

    def noisy(self, value: float) -> float:
        return value * (1 + self.space.cv * self.rng.gauss(0.0, 1.0))


@dataclass
class Trial:
    """A launched trial; repetitions are measured (and paid for) as they are asked for."""

    host: Host
    candidate: Candidate
    runs: list[float] = field(default_factory=list)
    benchmarks: int = 0

    @property
    def failure(self) -> str | None:
        return self.candidate.truth.failure

    def measure(self, repetitions: int) -> list[float]:
        """One benchmark of the next ``repetitions`` repetitions (its warmup included)."""
        level = self.candidate.truth.level(self.host.space.concurrency)
        start = len(self.runs)
        done = level.tok_s_runs[start : start + repetitions]
        seconds = level.warmup_s + sum(level.repetition_s[start : start + repetitions])
        self.host.gpu_s += _gpu_s(seconds, self.candidate.truth)
        new = [self.host.noisy(v) for v in done]
        self.runs += new
        self.benchmarks += 1
        return new

    def end(self) -> Measured:
        """The trial's server is stopped: log it."""
        full = self.failure is None and len(self.runs) == self.host.space.repetitions
        mean = statistics.fmean(self.runs) if self.runs else None
        self.host.events.append(Event(self.host.launches, self.host.gpu_s, self.candidate.index, full, mean))
        return Measured(self.candidate, self.runs, self.failure)

    def run_all(self) -> Measured:
        """Launch already paid: measure every repetition (unless the launch failed) and end."""
        if self.failure is None:
            self.measure(self.host.space.repetitions)
        return self.end()


# --- strategies ---

Strategy = Callable[[Space, int, Host, "StopRule"], None]


@dataclass
class StopRule:
    """When a run may end: the band found and the budget spent (or the host exhausted)."""

    space: Space
    budget_s: float

    def done(self, host: Host) -> bool:
        if host.exhausted:
            return True
        found = any(e.full and e.candidate in self.space.band for e in host.events)
        return found and host.gpu_s >= self.budget_s


def run_grid(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    """Every kept candidate in file order."""
    for candidate in space.kept:
        host.launch(candidate).run_all()


def run_random(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    """The kept candidates in a random order."""
    order = list(space.kept)
    random.Random(f"random/{seed}").shuffle(order)
    for candidate in order:
        if stop.done(host):
            return
        host.launch(candidate).run_all()


def _axis_labels(space: Space) -> list[tuple[str, list[str]]]:
    return [(axis.title, [label for label, _ in axis.points()]) for axis in space.campaign.axes]


_MAX_REPEATS = 200
"""Plain TPE: this many suggestions in a row of candidates it already measured ends the run."""


def run_plain_tpe(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    """Optuna's TPE with its defaults over the axes, every suggestion launched, failures FAIL."""
    axes = _axis_labels(space)
    by_labels = space.by_labels()
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    seen: dict[int, float | None] = {}
    repeats = 0
    while not stop.done(host) and repeats < _MAX_REPEATS:
        trial = study.ask()
        labels = tuple(trial.suggest_categorical(title, points) for title, points in axes)
        candidate = by_labels[labels]
        if candidate.index in seen:
            repeats += 1
            known = seen[candidate.index]
            if known is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, known)
            continue
        repeats = 0
        measured = host.launch(candidate).run_all()
        seen[candidate.index] = None if measured.failure else measured.mean
        if measured.failure:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, measured.mean)


def _levels(space: Space, runs: Sequence[float]) -> list[dict[str, Any]]:
    """A trial's benchmark levels, as the load generator's summary makes them, from its runs."""
    workload = space.campaign.workload
    assert workload is not None
    result = BenchmarkResult(
        concurrency=space.concurrency,
        input_len=workload.input_len,
        output_len=workload.output_len,
        repetitions=len(runs),
        tok_s_mean=statistics.fmean(runs),
        tok_s_stdev=stdev(runs),
        tok_s_ci95=ci95(runs),
        tok_s_runs=tuple(runs),
        requests=len(runs) * workload.requests_per_repetition,
        errors=0,
    )
    return [result.model_dump(mode="json")]


def ours_campaign(space: Space, seed: int) -> CampaignSpec:
    """The space's campaign as ``sweep run`` would search it: TPE with the seed, early stop."""
    return space.campaign.model_copy(
        update={
            "search": SearchSpec(strategy="tpe", seed=seed),
            "early_stop": space.campaign.early_stop or EarlyStopSpec(),
        }
    )


class LaunchFailed(Exception):
    """The emulator fails this launch (the line it prints says why)."""


class EmulatedTrials:
    """Stands in for ``TrialRunner`` (what deploys, benchmarks and destroys a trial's stack through
    Pulumi) under the real ``Sweep``: a deploy launches the candidate on the account's host (its
    startup paid), or measures more repetitions on the same server (``benchmark_again``)."""

    def __init__(self, space: Space, host: Host) -> None:
        self.space = space
        self.host = host
        self.running: Trial | None = None

    def deploy(
        self,
        row: PlanRow,
        pool_host: PoolHost,
        overrides: dict[str, Any] | None = None,
        *,
        benchmark_again: bool = False,
    ) -> list[dict[str, Any]]:
        if not benchmark_again:
            self.running = self.host.launch(self.space.by_stack[row.stack])
        assert self.running is not None
        if self.running.failure is not None:
            raise LaunchFailed(self.running.failure)
        repetitions = int((overrides or {}).get("benchmark.repetitions", self.space.repetitions))
        return _levels(self.space, self.running.measure(repetitions))

    def failure(self, stack: str, error: Exception) -> TrialFailure:
        return TrialFailure(classify_failure(str(error)).kind, str(error))

    def destroy(self, stack: str, *, clear_pending: bool = False) -> None:
        if self.running is not None:
            self.running.end()
            self.running = None

    def settle(self, stack: str) -> list[str]:
        return []


def run_ours(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    """The campaign's own search: ``sweep run``'s ``Sweep`` (``sglang_stacks.campaign.sweep``) on
    an in-memory study, its trials deployed by ``EmulatedTrials`` instead of Pulumi. Its own code
    asks the study, has preflight's verdict told infeasible, a repeated suggestion the earlier
    outcome, a failed launch a violated constraint, and after the first repetitions lets the
    interval pruner decide whether the rest are measured."""
    campaign = ours_campaign(space, seed)
    plan = dataclasses.replace(space.plan, campaign=campaign, strategy="tpe")
    search = Search.in_memory(campaign, plan.base, len(space.kept), space.repetitions)
    trials = EmulatedTrials(space, host)
    with tempfile.TemporaryDirectory(prefix="search-efficiency-") as folder:
        sweep = Sweep(plan, ROOT, Path(folder), Path(folder) / "history.sqlite", search, trials)  # type: ignore[arg-type]
        sweep.prepare()
        pool_host = campaign.pool[0]
        while not stop.done(host):
            picked = sweep.next_trial(pool_host)
            if picked is None:
                return
            sweep.run_trial(picked, pool_host)


RUNNERS: dict[str, Strategy] = {
    "grid": run_grid,
    "random": run_random,
    "tpe": run_plain_tpe,
    "ours": run_ours,
}


# --- results ---


@dataclass(frozen=True)
class RunResult:
    """One strategy's run with one seed."""

    strategy: str
    seed: int
    launches_to_band: int | None
    """None: the band was not found before the run stopped."""
    gpu_h_to_band: float | None
    pick: str | None
    """The stack picked at the budget (best measured mean of fully measured trials)."""
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


def _result(space: Space, strategy: str, seed: int, host: Host, budget_s: float) -> RunResult:
    to_band = next((e for e in host.events if e.full and space.in_band(space.candidates[e.candidate])), None)
    within = [
        e
        for e in host.events
        if e.full and e.mean is not None and (strategy == "grid" or e.gpu_s <= budget_s)
    ]
    best = max(within, key=lambda e: e.mean or 0.0, default=None)
    picked = space.candidates[best.candidate] if best else None
    failed = [e.launch for e in host.events if space.candidates[e.candidate].truth.failure]
    last = to_band.launch if to_band else host.launches
    stopped = sum(1 for e in host.events if not e.full and space.candidates[e.candidate].value is not None)
    return RunResult(
        strategy,
        seed,
        to_band.launch if to_band else None,
        to_band.gpu_s / 3600 if to_band else None,
        picked.stack if picked else None,
        picked is not None and space.is_optimum(picked),
        picked is not None and space.in_band(picked),
        host.launches,
        len(failed),
        sum(1 for launch in failed if launch <= last),
        stopped,
        host.gpu_s / 3600,
    )


def run(space: Space, strategy: str, seed: int, budget_pct: float) -> RunResult:
    """One strategy's run with one seed."""
    budget_s = space.kept_gpu_s * budget_pct / 100
    host = Host(space, random.Random(f"noise/{space.name}/{strategy}/{seed}"))
    RUNNERS[strategy](space, seed, host, StopRule(space, budget_s))
    return _result(space, strategy, seed, host, budget_s)


_SPACE: list[Space] = []
"""The space the pool's workers run on (forked with it, so it is worked out once)."""


def _run_in_worker(job: tuple[str, int, float]) -> RunResult:
    return run(_SPACE[0], *job)


def run_all(
    space: Space, strategies: Sequence[str], seeds: int, budget_pct: float, jobs: int
) -> dict[str, list[RunResult]]:
    """Every strategy with every seed, on ``jobs`` processes."""
    work = [(strategy, seed, budget_pct) for strategy in strategies for seed in range(seeds)]
    if jobs <= 1:
        done = [run(space, *job) for job in work]
    else:
        _SPACE[:] = [space]
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            done = list(pool.map(_run_in_worker, work))
    return {strategy: [r for r in done if r.strategy == strategy] for strategy in strategies}


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def p90(values: Sequence[float]) -> float:
    """Nearest-rank 90th percentile (no interpolation, so a run that never found the band counts)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]


@dataclass(frozen=True)
class Summary:
    """One strategy over all seeds, on one space."""

    strategy: str
    seeds: int
    launches_median: float
    launches_p90: float
    gpu_h_median: float
    gpu_h_p90: float
    pct_of_kept_median: float
    pct_of_kept_p90: float
    pick_is_optimum_pct: float
    pick_in_band_pct: float
    not_found: int
    failed_to_band_median: float
    stopped_early_median: float


def summarize(space: Space, strategy: str, results: Sequence[RunResult]) -> Summary:
    kept_h = space.kept_gpu_s / 3600
    launches = [float(r.launches_to_band) if r.launches_to_band else math.inf for r in results]
    hours = [r.gpu_h_to_band if r.gpu_h_to_band is not None else math.inf for r in results]
    return Summary(
        strategy,
        len(results),
        median(launches),
        p90(launches),
        median(hours),
        p90(hours),
        100 * median(hours) / kept_h,
        100 * p90(hours) / kept_h,
        100 * sum(r.pick_is_optimum for r in results) / len(results),
        100 * sum(r.pick_in_band for r in results) / len(results),
        sum(1 for r in results if r.launches_to_band is None),
        median([float(r.failed_to_band) for r in results]),
        median([float(r.stopped_early) for r in results]),
    )


def _n(value: float, digits: int = 1) -> str:
    if math.isinf(value):
        return "not found"
    return f"{value:.0f}" if digits == 0 and value.is_integer() else f"{value:.{max(digits, 1)}f}"


def table(space: Space, summaries: Sequence[Summary]) -> str:
    """The space's markdown table."""
    lines = [
        "| strategy | launches to band (median / p90) | GPU-h to band (median / p90) | % of kept GPU time "
        "(median / p90) | of those launches, failed (median) | trials stopped early (median) "
        "| final pick is the optimum | final pick in band |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in summaries:
        lines.append(
            f"| {s.strategy} | {_n(s.launches_median, 0)} / {_n(s.launches_p90, 0)} | "
            f"{_n(s.gpu_h_median)} / {_n(s.gpu_h_p90)} | "
            f"{_n(s.pct_of_kept_median)} / {_n(s.pct_of_kept_p90)} | "
            f"{_n(s.failed_to_band_median, 0)} | {_n(s.stopped_early_median, 0)} | "
            f"{s.pick_is_optimum_pct:.0f} % | {s.pick_in_band_pct:.0f} % |"
        )
    return "\n".join(lines)


def verdicts(summaries: dict[str, Summary]) -> Iterator[tuple[str, float, float, bool]]:
    """(target, measured, limit, met) for each of the issue's targets on ours."""
    ours = summaries.get("ours")
    if ours is None:
        return
    yield (
        "median % of kept GPU time",
        ours.pct_of_kept_median,
        TARGETS["median_pct_of_kept"],
        (ours.pct_of_kept_median <= TARGETS["median_pct_of_kept"]),
    )
    yield (
        "p90 % of kept GPU time",
        ours.pct_of_kept_p90,
        TARGETS["p90_pct_of_kept"],
        (ours.pct_of_kept_p90 <= TARGETS["p90_pct_of_kept"]),
    )
    tpe = summaries.get("tpe")
    if tpe is not None:
        pct = 100 * ours.gpu_h_median / tpe.gpu_h_median if tpe.gpu_h_median else math.inf
        yield (
            "median % of plain TPE's GPU time",
            pct,
            TARGETS["median_pct_of_tpe"],
            pct <= TARGETS["median_pct_of_tpe"],
        )


def describe(space: Space) -> str:
    """The space in one paragraph: its size, what preflight keeps, the optimum and its band."""
    kept = space.kept
    best = [c for c in space.candidates if space.is_optimum(c)]
    band = [c for c in space.candidates if space.in_band(c)]
    failing = sum(c.truth.failure is not None for c in space.candidates)
    return (
        f"{space.name}: {len(space.candidates)} candidates, {len(kept)} kept by preflight "
        f"({space.kept_gpu_s / 3600:.1f} GPU-h to run them all); {failing} fail on the emulator, "
        f"{sum(c.truth.failure is not None for c in kept)} of them kept. Optimum {space.optimum:.2f} tok/s "
        f"at concurrency {space.concurrency} ({len(best)} candidates, {sum(c.kept for c in best)} kept; e.g. "
        f"{best[0].stack}: {', '.join(best[0].labels)}); noise band {100 * space.band_fraction:.3f} % "
        f"(CV {100 * space.cv:.3f} %, {space.repetitions} repetitions): {len(band)} candidates, "
        f"{sum(c.kept for c in band)} kept."
    )


def _finite(value: Any) -> Any:
    """``value`` with every infinite number (a band never found) as null, for standard JSON."""
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per strategy (default 20; 3 with --quick)"
    )
    parser.add_argument("--quick", action="store_true", help="the seeds' space only, 3 seeds unless --seeds")
    parser.add_argument("--spaces", default=None, help=f"comma-separated, of {', '.join(SPACES)}")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument(
        "--budget-pct", type=float, default=15.0, help="%% of the kept GPU time spent before the final pick"
    )
    parser.add_argument("--cv", type=float, help="noise: coefficient of variation (default: NOISE_CV)")
    parser.add_argument("--json", type=Path, help="write every run's result here")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)"
    )
    args = parser.parse_args(argv)
    seeds = args.seeds or (3 if args.quick else 20)
    names = (args.spaces or ("seeds" if args.quick else ",".join(SPACES))).split(",")
    strategies = args.strategies.split(",")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    report: dict[str, object] = {"seeds": seeds, "budget_pct": args.budget_pct, "spaces": {}}
    for name in names:
        started = time.monotonic()
        space = load_space(name, SPACES[name], args.cv or NOISE_CV[name])
        print(describe(space), f"(worked out in {time.monotonic() - started:.0f} s)", flush=True)
        results = run_all(space, strategies, seeds, args.budget_pct, args.jobs)
        summaries = {s: summarize(space, s, r) for s, r in results.items()}
        print(table(space, list(summaries.values())))
        for target, measured, limit, met in verdicts(summaries):
            print(f"ours, {target}: {_n(measured)} (target <= {limit:.0f}): {'met' if met else 'MISSED'}")
        print(f"({time.monotonic() - started:.0f} s)\n", flush=True)
        report["spaces"][name] = {  # type: ignore[index]
            "candidates": len(space.candidates),
            "cv": space.cv,
            "kept": len(space.kept),
            "kept_gpu_h": space.kept_gpu_s / 3600,
            "optimum_tok_s": space.optimum,
            "band_fraction": space.band_fraction,
            "kept_in_order": [
                {
                    "stack": c.stack,
                    "labels": c.labels,
                    "gpu_h": _gpu_s(c.truth.host_s, c.truth) / 3600,
                    "tok_s": c.value,
                    "in_band": space.in_band(c),
                    "optimum": space.is_optimum(c),
                }
                for c in space.kept
            ],
            "summaries": {s: asdict(v) for s, v in summaries.items()},
            "runs": {s: [asdict(r) for r in rs] for s, rs in results.items()},
        }
    if args.json:
        args.json.write_text(json.dumps(_finite(report), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
