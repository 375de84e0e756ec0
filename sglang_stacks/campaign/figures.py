"""The report's figures, drawn by matplotlib's Agg renderer (imported only when a report is made):
the objective per trial with its 95 % interval; the serving plane (tok/s per GPU against tok/s per
user, a line per configuration across its load levels, the Pareto frontier highlighted); the search
history (the objective by trial number, the best so far); and each axis's effect (the mean
objective of the trials at each of its points)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.frontier import (
    HistoryPoint,
    ServingCurve,
    best_so_far,
    frontier,
    search_history,
    serving_curves,
    titles,
)
from sglang_stacks.campaign.objective import describe
from sglang_stacks.campaign.rank import Ranking

__all__ = ["FIGURES", "draw_all", "draw_history", "draw_serving"]

FIGURES = {
    "objective": "objective.png",
    "pareto": "pareto.png",
    "history": "history.png",
    "axes": "axes.png",
}
"""Figure -> its file name in the report folder."""


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, figure: Any, path: Path) -> Path:
    """Lays ``figure`` out, writes it to ``path`` (its folder made if missing) and frees it."""
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _objective(plt: Any, ranking: Ranking, path: Path) -> None:
    trials = list(reversed(ranking.trials))
    figure, axes = plt.subplots(figsize=(9, 0.32 * len(trials) + 1.6))
    for y, trial in enumerate(trials):
        color = "tab:green" if trial.rank == 1 else ("tab:blue" if trial.within_noise else "tab:gray")
        low, high = trial.ci95
        axes.errorbar(
            trial.mean, y, xerr=[[trial.mean - low], [high - trial.mean]], fmt="o", color=color, capsize=3
        )
    axes.set_yticks(
        range(len(trials)), [f"{t.stack}  {' '.join(t.labels.values())}" for t in trials], fontsize=7
    )
    axes.set_xlabel(f"{describe(ranking.objective)} (mean, 95 % interval)")
    axes.set_title("Trials ranked: green best, blue within noise of it, grey significantly worse", fontsize=9)
    axes.grid(axis="x", alpha=0.3)
    _save(plt, figure, path)


def _axes(plt: Any, ranking: Ranking, path: Path) -> None:
    titles = list(ranking.trials[0].labels) if ranking.trials else []
    figure, grid = plt.subplots(
        1, max(len(titles), 1), figsize=(3.2 * max(len(titles), 1), 3.4), squeeze=False
    )
    for axes, title in zip(grid[0], titles, strict=False):
        points: dict[str, list[float]] = {}
        for trial in ranking.trials:
            points.setdefault(trial.labels[title], []).append(trial.mean)
        names = list(points)
        axes.bar(range(len(names)), [fmean(points[n]) for n in names], color="tab:blue")
        axes.set_xticks(range(len(names)), names, rotation=30, fontsize=7, ha="right")
        axes.set_title(title.split(".")[-1], fontsize=9)
    grid[0][0].set_ylabel(f"mean {describe(ranking.objective)}", fontsize=8)
    _save(plt, figure, path)


def draw_all(ranking: Ranking, records: Sequence[TrialRecord], folder: Path) -> dict[str, Path]:
    """Draw every figure into ``folder``; their paths by figure name."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / file for name, file in FIGURES.items()}
    _objective(plt, ranking, paths["objective"])
    draw_serving(serving_curves(records), paths["pareto"])
    goal = ranking.objective
    draw_history(
        search_history(records),
        objective=describe(goal),
        maximize=goal.goal == "maximize",
        path=paths["history"],
    )
    _axes(plt, ranking, paths["axes"])
    return paths


def draw_serving(curves: Sequence[ServingCurve], path: Path) -> Path:
    """The serving plane: tok/s per GPU against tok/s per user, one line per configuration through
    its load levels, the Pareto frontier in red with each of its points' load, and the
    configurations on it coloured and named (by the axis values that set them apart)."""
    plt = _pyplot()
    front = frontier(curves)
    on_front = list(dict.fromkeys(curve.stack for curve, _ in front))
    named = titles([curve for curve in curves if curve.stack in on_front])
    figure, axes = plt.subplots(figsize=(8, 5.2))
    colors = dict(zip(on_front, plt.get_cmap("tab10").colors * 10, strict=False))
    for curve in sorted(curves, key=lambda c: c.stack in colors):  # the frontier's configurations on top
        xs = [p.tok_s_per_user for p in curve.points]
        ys = [p.tok_s_per_gpu for p in curve.points]
        if curve.stack in colors:
            label = f"{curve.stack}  {named[curve.stack]}".rstrip()
            axes.plot(xs, ys, "o-", color=colors[curve.stack], lw=1.4, ms=4, label=label, zorder=3)
        else:
            style = "o--" if not curve.feasible else "o-"
            axes.plot(xs, ys, style, color="tab:gray", alpha=0.4, lw=0.8, ms=2.5, zorder=2)
    axes.plot(
        [p.tok_s_per_user for _, p in front],
        [p.tok_s_per_gpu for _, p in front],
        "o-",
        color="tab:red",
        lw=2.5,
        ms=9,
        mfc="none",
        mew=1.5,
        alpha=0.75,
        label="Pareto frontier",
        zorder=4,
    )
    for _, point in front:
        axes.annotate(
            point.level,
            (point.tok_s_per_user, point.tok_s_per_gpu),
            fontsize=7,
            color="tab:red",
            xytext=(6, 4),
            textcoords="offset points",
        )
    axes.set_xlabel("tok/s per user (interactivity)")
    axes.set_ylabel("tok/s per GPU (throughput)")
    axes.set_title(
        "One line per configuration through its load levels; grey: off the frontier, dashed: missed an SLO",
        fontsize=8,
    )
    axes.grid(alpha=0.3)
    axes.legend(fontsize=6.5, loc="best")
    return _save(plt, figure, path)


_HISTORY_STYLE = {
    "feasible": ("o", "tab:blue", "measured"),
    "infeasible": ("x", "tab:orange", "measured, missed an SLO"),
    "failed": ("v", "tab:red", "failed on its host"),
    "stopped": ("s", "tab:purple", "stopped early"),
    "discarded": ("|", "tab:gray", "discarded by preflight (not launched)"),
}


def draw_history(points: Sequence[HistoryPoint], *, objective: str, maximize: bool, path: Path) -> Path:
    """The search history: each trial's objective by trial number, the best so far as a line, and
    the trials without a value (failed, discarded) as marks along the bottom."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 4.2))
    valued = [p.value for p in points if p.value is not None]
    # Trials without a value (failed, stopped early, discarded) sit on a strip just below the others.
    low, high = (min(valued), max(valued)) if valued else (0.0, 1.0)
    floor = low - 0.08 * ((high - low) or abs(low) or 1.0)
    for kind, (marker, color, label) in _HISTORY_STYLE.items():
        chosen = [p for p in points if p.kind == kind]
        if not chosen:
            continue
        axes.scatter(
            [p.number for p in chosen],
            [p.value if p.value is not None else floor for p in chosen],
            marker=marker,
            color=color,
            s=28 if marker != "|" else 60,
            label=f"{label} ({len(chosen)})",
            zorder=3,
        )
    best = best_so_far(points, maximize=maximize)
    steps = [(p.number, b) for p, b in zip(points, best, strict=True) if b is not None]
    if steps:
        axes.step(
            [n for n, _ in steps],
            [b for _, b in steps],
            where="post",
            color="tab:green",
            lw=2,
            label="best so far",
            zorder=2,
        )
    axes.set_xlabel("trial number")
    axes.set_ylabel(objective)
    axes.set_title(
        "Search history: trials without a value (failed, stopped, discarded) along the bottom", fontsize=8
    )
    axes.xaxis.get_major_locator().set_params(integer=True)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="best")
    return _save(plt, figure, path)
