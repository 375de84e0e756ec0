"""The strategies the search-efficiency benchmark compares, each as a careful user would run it.

Fair baselines:

- ``grid``: every kept candidate (preflight's verdict) once, in a random order of its own per seed:
  ``sweep run`` with ``search.strategy: grid`` when the file's order says nothing;
- ``random``: Optuna's ``RandomSampler`` over the axes, every new suggestion launched (no
  preflight), a suggestion already measured told its result again at no cost;
- ``tpe``: Optuna's ``TPESampler`` univariate (``multivariate=False``, each axis modelled on its
  own: Optuna's default before 5.0), every new suggestion launched (no preflight), a failed launch
  told as a completed trial with the worst value (0 tok/s; told ``FAIL``, TPE would ignore it and
  keep suggesting the same doomed corner);
- ``tpe-preflight``: the same with the project's preflight: a suggestion preflight discards is told
  the worst value without a launch;
- ``mtpe``: multivariate TPE (``multivariate=True``, Optuna 5.0's default with one objective) with
  the same preflight and worst values: what ``ours`` is without the project's additions
  (constraints, early stop, its opening).

Shown apart: ``grid-file``, the kept candidates in the campaign file's order (the files list their
best guesses first, so this measures the file's author as much as the search).

``ours``: ``sweep run`` itself, the ``Sweep`` of ``sglang_stacks.campaign.sweep`` on an in-memory
study of the campaign with ``search.strategy: tpe`` and early stop after 2 repetitions, its trial
runner's Pulumi deploy replaced by the emulated trial (``EmulatedTrials``).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import statistics
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from search_host import Host, StopRule, Trial
from search_space import ROOT, Space

from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.campaign.model_search import EarlyStopSpec, SearchSpec
from sglang_stacks.campaign.opening import OpeningSampler
from sglang_stacks.campaign.plan import PlanRow
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.space import SearchSpace
from sglang_stacks.campaign.sweep import Sweep
from sglang_stacks.campaign.trial import TrialFailure
from sglang_stacks.hostops.server_failure import classify_failure
from sglang_stacks.results.stats import BenchmarkResult, ci95, stdev

__all__ = ["BASELINES", "RUNNERS", "SHOWN_APART", "Strategy"]

Strategy = Callable[[Space, int, Host, StopRule], None]

MAX_REPEATS = 200
"""A sampler that suggests this many already measured candidates in a row has converged: its run
ends (ours stops after ``sglang_stacks.campaign.limits.MAX_REPEATS``, its own rule)."""


def run_grid_file(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    """Every kept candidate in the campaign file's order."""
    for candidate in space.kept:
        if stop.done(host):
            return
        host.launch(candidate).run_all()


def run_grid(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    """Every kept candidate in a random order of the seed's."""
    order = list(space.kept)
    random.Random(f"grid/{seed}").shuffle(order)
    for candidate in order:
        if stop.done(host):
            return
        host.launch(candidate).run_all()


def _ask_tell(
    space: Space, host: Host, stop: StopRule, sampler: optuna.samplers.BaseSampler, preflight: bool
) -> None:
    """A user's ask-and-tell loop over the axes: each new suggestion launched and told its mean, a
    failed launch (or, with ``preflight``, a discarded suggestion, not launched) told 0 tok/s, a
    suggestion measured before told that value again."""
    distributions = SearchSpace.of(space.campaign, space.plan.base).distributions()
    titles = list(distributions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(direction="maximize", sampler=sampler)
    known: dict[int, float] = {}
    repeats = 0
    while not stop.done(host) and repeats < MAX_REPEATS:
        trial = study.ask(distributions)
        candidate = space.by_labels[tuple(str(trial.params[t]) for t in titles)]
        if candidate.index in known:
            repeats += 1
        else:
            repeats = 0
            if preflight and not candidate.kept:
                known[candidate.index] = 0.0
            else:
                known[candidate.index] = host.launch(candidate).run_all() or 0.0
        study.tell(trial, known[candidate.index])


def run_random(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    _ask_tell(space, host, stop, optuna.samplers.RandomSampler(seed=seed), preflight=False)


def _univariate_tpe(seed: int) -> optuna.samplers.TPESampler:
    # Said outright: from Optuna 5.0 a TPESampler left to its defaults is multivariate, which is mtpe.
    return optuna.samplers.TPESampler(seed=seed, multivariate=False)


def run_tpe(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    _ask_tell(space, host, stop, _univariate_tpe(seed), preflight=False)


def run_tpe_preflight(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    _ask_tell(space, host, stop, _univariate_tpe(seed), preflight=True)


def run_mtpe(space: Space, seed: int, host: Host, stop: StopRule) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True)
    _ask_tell(space, host, stop, sampler, preflight=True)


# --- ours: the campaign's own Sweep, its Pulumi deploys replaced by emulated trials ---


def _levels(space: Space, runs: Sequence[float]) -> list[BenchmarkResult]:
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
    return [result]


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
    ) -> list[BenchmarkResult]:
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


def run_ours(space: Space, seed: int, host: Host, stop: StopRule, *, opening: bool = True) -> None:
    """The campaign's own search: ``sweep run``'s ``Sweep`` on an in-memory study, its trials
    deployed by ``EmulatedTrials`` instead of Pulumi. Its own code asks the study, has preflight's
    verdict told infeasible, a repeated suggestion the earlier outcome, a failed launch a violated
    constraint, and after the first repetitions lets the interval pruner decide whether the rest
    are measured. Without ``opening``, its sampler is the model alone (what ours was before it
    opened from the base stack; shown apart)."""
    campaign = ours_campaign(space, seed)
    plan = dataclasses.replace(space.plan, campaign=campaign, strategy="tpe")
    search = Search.in_memory(campaign, plan.base, len(space.kept), space.repetitions)
    if not opening:
        assert isinstance(search.study.sampler, OpeningSampler)
        search.study.sampler = search.study.sampler.model
    trials = EmulatedTrials(space, host)
    with tempfile.TemporaryDirectory(prefix="search-efficiency-") as folder:
        sweep = Sweep(plan, ROOT, Path(folder), Path(folder) / "history.sqlite", search, trials)  # type: ignore[arg-type]  # a stand-in TrialRunner
        sweep.prepare()
        pool_host = campaign.pool[0]
        while not stop.done(host):
            picked = sweep.next_trial(pool_host)
            if picked is None:
                return
            sweep.run_trial(picked, pool_host)


RUNNERS: dict[str, Strategy] = {
    "grid-file": run_grid_file,
    "grid": run_grid,
    "random": run_random,
    "tpe": run_tpe,
    "tpe-preflight": run_tpe_preflight,
    "mtpe": run_mtpe,
    "ours": run_ours,
    "ours-no-opening": functools.partial(run_ours, opening=False),
}
BASELINES = ("grid", "random", "tpe", "tpe-preflight", "mtpe")
"""The fair baselines ours is measured against."""
SHOWN_APART = ("grid-file", "ours-no-opening")
"""Shown, not compared: the file's order is its author's prior, not a search; ours without its
opening shows what the opening is worth."""
