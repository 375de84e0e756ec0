"""What the report's two search figures show, computed without drawing: the serving curves (tok/s
per GPU against tok/s per user, one curve per configuration across its load levels, as serving
benchmarks plot them) with their Pareto frontier, and the search history (the objective by trial
number, with the best so far)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Literal

from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.objective import READERS
from sglang_stacks.results.stats import BenchmarkResult

__all__ = [
    "HistoryKind",
    "HistoryPoint",
    "LoadPoint",
    "ServingCurve",
    "best_so_far",
    "frontier",
    "search_history",
    "serving_curve",
    "serving_curves",
    "titles",
]


@dataclass(frozen=True)
class LoadPoint:
    """One load level of one configuration on the serving plane."""

    level: str
    """The load level in words: ``c=16`` or ``4 req/s``."""
    tok_s_per_user: float
    """Output tok/s each stream sees (the level's tok/s over its streams): interactivity."""
    tok_s_per_gpu: float
    """Output tok/s over the GPUs the server uses: throughput per GPU."""


@dataclass(frozen=True)
class ServingCurve:
    """A configuration's points across its load levels, from light to heavy load."""

    stack: str
    labels: Mapping[str, str]
    """Its point on each axis (``server.cuda_graph_max_bs`` -> ``128``)."""
    feasible: bool
    """Met every constraint; an infeasible configuration is drawn but never on the frontier."""
    points: tuple[LoadPoint, ...]


def _level(result: BenchmarkResult) -> str:
    return f"{result.request_rate:g} req/s" if result.request_rate is not None else f"c={result.concurrency}"


def serving_curve(
    stack: str,
    labels: Mapping[str, str],
    levels: Sequence[BenchmarkResult],
    gpus: int,
    *,
    feasible: bool = True,
) -> ServingCurve:
    """A trial's curve from its benchmark levels and the GPUs its server uses, with tok/s per GPU
    and per user as the campaign's objectives read them."""
    results = sorted(
        levels,
        key=lambda r: (r.request_rate is not None, r.request_rate or 0.0, r.concurrency),
    )
    points = tuple(
        LoadPoint(
            level=_level(result),
            tok_s_per_user=fmean(READERS["tok_s_per_user"](result, gpus)),
            tok_s_per_gpu=fmean(READERS["tok_s_per_gpu"](result, gpus)),
        )
        for result in results
    )
    return ServingCurve(stack=stack, labels=dict(labels), feasible=feasible, points=points)


def titles(curves: Sequence[ServingCurve]) -> dict[str, str]:
    """Each curve's axis values in words (``cuda_graph_max_bs=128, mem_fraction_static=0.88``),
    without the axes on which all of them agree."""
    keys = list(dict.fromkeys(key for curve in curves for key in curve.labels))
    varying = [key for key in keys if len({curve.labels.get(key) for curve in curves}) > 1]
    return {
        curve.stack: ", ".join(f"{key.split('.')[-1]}={curve.labels.get(key, '-')}" for key in varying)
        for curve in curves
    }


def frontier(curves: Sequence[ServingCurve]) -> list[tuple[ServingCurve, LoadPoint]]:
    """The points of feasible curves that no other such point beats on both tok/s per user and tok/s
    per GPU, from the most interactive to the highest throughput."""
    candidates = [(curve, point) for curve in curves if curve.feasible for point in curve.points]

    def beaten(point: LoadPoint) -> bool:
        return any(
            other.tok_s_per_user >= point.tok_s_per_user
            and other.tok_s_per_gpu >= point.tok_s_per_gpu
            and (other.tok_s_per_user > point.tok_s_per_user or other.tok_s_per_gpu > point.tok_s_per_gpu)
            for _, other in candidates
        )

    front = [(curve, point) for curve, point in candidates if not beaten(point)]
    return sorted(front, key=lambda item: (-item[1].tok_s_per_user, item[1].tok_s_per_gpu))


HistoryKind = Literal["feasible", "infeasible", "stopped", "failed", "discarded"]


@dataclass(frozen=True)
class HistoryPoint:
    """One trial of the search, in the order the study numbered them."""

    number: int
    value: float | None
    """Its objective value; None when it has none (failed on its host, or never launched)."""
    kind: HistoryKind
    """``feasible``: measured and within every constraint; ``infeasible``: measured but missed an SLO;
    ``stopped``: stopped early, clearly worse after its first repetitions; ``failed``: failed on its
    host; ``discarded``: preflight said it could not work, nothing launched."""


def best_so_far(points: Sequence[HistoryPoint], *, maximize: bool) -> list[float | None]:
    """For each trial, the best feasible value up to and including it (None before the first)."""
    best: float | None = None
    found: list[float | None] = []
    for point in points:
        if point.kind == "feasible" and point.value is not None:
            better = best is None or (point.value > best if maximize else point.value < best)
            best = point.value if better else best
        found.append(best)
    return found


def serving_curves(records: Sequence[TrialRecord]) -> list[ServingCurve]:
    """The curve of every trial that measured its load levels (in full, or stopped early)."""
    return [
        serving_curve(r.stack, r.labels, r.levels, r.gpus, feasible=r.feasible)
        for r in records
        if r.levels and r.status in ("measured", "done")
    ]


def search_history(records: Sequence[TrialRecord]) -> list[HistoryPoint]:
    """Each trial the search asked for, by number, with its first objective's value and what came of
    it. Left out: a repeated suggestion (nothing launched, the earlier result again), a trial still
    running, and one that was interrupted (its result, or its run again, is another trial's)."""
    points: list[HistoryPoint] = []
    for record in sorted(records, key=lambda r: r.number):
        if record.status in ("duplicate", "interrupted") or record.state in ("RUNNING", "WAITING", "FAIL"):
            continue  # a repeat, a trial still running, or one interrupted and settled by another
        value = record.values[0] if record.values and record.status == "done" else None
        kind: HistoryKind
        if record.status == "infeasible":
            kind = "discarded"
        elif record.status == "failed":
            kind = "failed"
        elif record.state == "PRUNED":
            kind = "stopped"
        else:
            kind = "feasible" if record.feasible else "infeasible"
        points.append(
            HistoryPoint(record.number, value if kind in ("feasible", "infeasible") else None, kind)
        )
    return points
