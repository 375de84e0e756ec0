"""The search-efficiency benchmark's figures: each strategy's runs summed up over the seeds, ours
against the best fair baseline with the targets, and the tables (markdown) that show them.

Targets, on every space and noise level: ours needs at most ``RATIO_TARGET`` of the best fair
baseline's GPU-hours to the band (median; where that baseline's median run finds the band within
its first ``QUICK_LAUNCHES`` launches, at most one average launch more than it), never more at the
90th percentile than any fair baseline, and its final pick is in the band in at least
``PICK_TARGET`` of the seeds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from search_space import Noise, Space
from search_strategies import BASELINES

__all__ = ["Comparison", "Summary", "compare", "markdown", "p90", "summarize", "table"]

RATIO_TARGET = 0.60
QUICK_LAUNCHES = 2
PICK_TARGET = 0.95


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def p90(values: Sequence[float]) -> float:
    """Nearest-rank 90th percentile (no interpolation, so a run that never found the band counts)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]


@dataclass(frozen=True)
class Summary:
    """One strategy over all seeds, on one space at one noise level."""

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
    cpu_s_median: float


def summarize(space: Space, strategy: str, results: Sequence[Any]) -> Summary:
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
        median([r.cpu_s for r in results]),
    )


@dataclass(frozen=True)
class Comparison:
    """Ours against the fair baselines on one space at one noise level, with the targets."""

    best: str
    """The fair baseline with the lowest median GPU-hours to the band."""
    best_median_h: float
    best_median_launches: float
    best_p90: str
    """The fair baseline with the lowest 90th percentile."""
    best_p90_h: float
    ours_median_h: float
    ours_p90_h: float
    mean_trial_h: float
    ratio_median: float
    ratio_p90: float
    median_limit_h: float
    """What ours may spend (median): the ratio target, or one average launch beyond a quick baseline."""
    median_met: bool
    p90_met: bool
    pick_in_band_pct: float
    pick_met: bool

    def sentence(self) -> str:
        def verdict(met: bool) -> str:
            return "met" if met else "MISSED"

        quick = self.best_median_launches <= QUICK_LAUNCHES
        rule = "one average launch beyond it" if quick else f"{100 * RATIO_TARGET:.0f} % of it"
        ours, best, limit = _h(self.ours_median_h), _h(self.best_median_h), _h(self.median_limit_h)
        ours_p90, best_p90 = _h(self.ours_p90_h), _h(self.best_p90_h)
        return (
            f"ours / best fair baseline ({self.best}): median {_pct(self.ratio_median)} "
            f"({ours} against {best} GPU-h; at most {limit}, {rule}): {verdict(self.median_met)}; "
            f"p90 {_pct(self.ratio_p90)} of {self.best_p90}'s ({ours_p90} against {best_p90}): "
            f"{verdict(self.p90_met)}; final pick in band {self.pick_in_band_pct:.0f} % "
            f"(at least {100 * PICK_TARGET:.0f} %): {verdict(self.pick_met)}"
        )


def compare(space: Space, summaries: Sequence[Summary]) -> Comparison | None:
    """Ours against the best fair baseline, or None when either did not run."""
    by = {s.strategy: s for s in summaries}
    baselines = [by[name] for name in BASELINES if name in by]
    ours = by.get("ours")
    if ours is None or not baselines:
        return None
    best = min(baselines, key=lambda s: (s.gpu_h_median, s.gpu_h_p90))
    best_p90 = min(baselines, key=lambda s: (s.gpu_h_p90, s.gpu_h_median))
    mean_h = space.mean_trial_gpu_s / 3600
    quick = best.launches_median <= QUICK_LAUNCHES
    limit = best.gpu_h_median + mean_h if quick else RATIO_TARGET * best.gpu_h_median
    return Comparison(
        best=best.strategy,
        best_median_h=best.gpu_h_median,
        best_median_launches=best.launches_median,
        best_p90=best_p90.strategy,
        best_p90_h=best_p90.gpu_h_p90,
        ours_median_h=ours.gpu_h_median,
        ours_p90_h=ours.gpu_h_p90,
        mean_trial_h=mean_h,
        ratio_median=_ratio(ours.gpu_h_median, best.gpu_h_median),
        ratio_p90=_ratio(ours.gpu_h_p90, best_p90.gpu_h_p90),
        median_limit_h=limit,
        median_met=ours.gpu_h_median <= limit,
        p90_met=ours.gpu_h_p90 <= best_p90.gpu_h_p90,
        pick_in_band_pct=ours.pick_in_band_pct,
        pick_met=ours.pick_in_band_pct >= 100 * PICK_TARGET,
    )


def _ratio(ours: float, baseline: float) -> float:
    if math.isinf(ours):
        return math.inf
    if math.isinf(baseline):
        return 0.0
    return ours / baseline if baseline else math.inf


def _h(value: float) -> str:
    return "not found" if math.isinf(value) else f"{value:.1f}"


def _pct(value: float) -> str:
    return "-" if math.isinf(value) else f"{100 * value:.0f} %"


def _n(value: float, whole: bool = False) -> str:
    if math.isinf(value):
        return "not found"
    return f"{value:.0f}" if whole and float(value).is_integer() else f"{value:.1f}"


def table(summaries: Sequence[Summary], comparison: Comparison | None) -> str:
    """One space and noise level's markdown table, a row per strategy."""
    lines = [
        "| strategy | launches to band (median / p90) | GPU-h to band (median / p90) | % of kept GPU time "
        "(median / p90) | runs without the band | failed launches before it (median) | trials stopped early "
        "(median) | final pick in band | final pick the optimum |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in summaries:
        name = s.strategy
        if comparison is not None and name == comparison.best:
            name += " (best baseline)"
        pct = f"{_h(s.pct_of_kept_median)} / {_h(s.pct_of_kept_p90)}"
        lines.append(
            f"| {name} | {_n(s.launches_median, True)} / {_n(s.launches_p90, True)} | "
            f"{_h(s.gpu_h_median)} / {_h(s.gpu_h_p90)} | {pct} | "
            f"{s.not_found} | {_n(s.failed_to_band_median, True)} | {_n(s.stopped_early_median, True)} | "
            f"{s.pick_in_band_pct:.0f} % | {s.pick_is_optimum_pct:.0f} % |"
        )
    return "\n".join(lines)


def _overview(rows: Sequence[tuple[Space, Noise, str, Sequence[Summary], Comparison | None]]) -> str:
    lines = [
        "| space | noise (between / within launches) | best fair baseline: GPU-h to band (median / p90) | "
        "ours (median / p90) | ours / best (median / p90) | ours' final pick in band | targets |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for space, noise, _, _, c in rows:
        if c is None:
            continue
        missed = [
            what
            for what, met in (("median", c.median_met), ("p90", c.p90_met), ("pick", c.pick_met))
            if not met
        ]
        terms = f"{100 * noise.between_cv:.2f} % / {100 * noise.within_cv:.3f} %"
        lines.append(
            f"| {space.name} | {noise.name} ({terms}) | "
            f"{c.best}: {_h(c.best_median_h)} / {_h(c.best_p90_h)} ({c.best_p90} at p90) | "
            f"{_h(c.ours_median_h)} / {_h(c.ours_p90_h)} | {_pct(c.ratio_median)} / {_pct(c.ratio_p90)} | "
            f"{c.pick_in_band_pct:.0f} % | {'all met' if not missed else 'missed: ' + ', '.join(missed)} |"
        )
    return "\n".join(lines)


def markdown(
    rows: Sequence[tuple[Space, Noise, str, Sequence[Summary], Comparison | None]],
    seeds: int,
    budget: str,
    command: str,
    elapsed_s: float,
    cpu_s: float,
) -> str:
    """Every table, with the overview first, as the page ``docs/`` keeps."""
    parts = [
        "# Search efficiency: the figures",
        "",
        f"Written by `{command}` ({seeds} seeds per strategy per space per noise level; final pick after "
        f"{budget}; {elapsed_s / 60:.0f} minutes, {cpu_s / 60:.0f} "
        "minutes of CPU). How they are made and what they mean: "
        "[campaigns.md](campaigns.md#search-efficiency).",
        "",
        "## Ours against the best fair baseline",
        "",
        _overview(rows),
    ]
    for space, noise, text, summaries, comparison in rows:
        parts += ["", f"## {space.name}, noise {noise.name}", "", text, "", table(summaries, comparison)]
        if comparison is not None:
            parts += ["", comparison.sentence() + "."]
    return "\n".join(parts) + "\n"
