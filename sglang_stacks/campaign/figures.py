"""The report's figures, drawn by matplotlib's Agg renderer (imported only when a report is made):
the objective per trial with its 95 % interval, tok/s against TTFT p50 with the Pareto front,
and each axis's effect (the mean objective of the trials at each of its points)."""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any

from sglang_stacks.campaign.objective import describe
from sglang_stacks.campaign.rank import Ranking

__all__ = ["FIGURES", "draw_all", "pareto_front"]

FIGURES = {"objective": "objective.png", "pareto": "pareto.png", "axes": "axes.png"}
"""Figure -> its file name in the report folder."""


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both higher tok/s and lower TTFT."""
    front = []
    for i, (tok_s, ttft) in enumerate(points):
        dominated = any(
            (o_tok >= tok_s and o_ttft <= ttft) and (o_tok > tok_s or o_ttft < ttft)
            for j, (o_tok, o_ttft) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][1])


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
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _pareto(plt: Any, ranking: Ranking, path: Path) -> None:
    trials = [t for t in ranking.trials if t.ttft_p50_ms is not None]
    points = [(t.mean, float(t.ttft_p50_ms or 0.0)) for t in trials]
    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.scatter([p[1] for p in points], [p[0] for p in points], color="tab:gray", s=18, label="trial")
    front = pareto_front(points)
    axes.plot(
        [points[i][1] for i in front],
        [points[i][0] for i in front],
        "o-",
        color="tab:red",
        label="Pareto front",
    )
    for i in front:
        axes.annotate(
            trials[i].stack,
            (points[i][1], points[i][0]),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    axes.set_xlabel("TTFT p50 (ms)")
    axes.set_ylabel(describe(ranking.objective))
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


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
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_all(ranking: Ranking, folder: Path) -> dict[str, Path]:
    """Draw every figure into ``folder``; their paths by figure name."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / file for name, file in FIGURES.items()}
    _objective(plt, ranking, paths["objective"])
    _pareto(plt, ranking, paths["pareto"])
    _axes(plt, ranking, paths["axes"])
    return paths
