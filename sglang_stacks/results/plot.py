"""The tok/s-over-time picture of the results history: one line per stack, each point its mean
tok/s with its 95 % interval as a bar, drawn by matplotlib's Agg renderer (no display needed).

matplotlib is imported when a picture is drawn, not when this module is: it takes a second or
more, which no other command should wait for.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from sglang_stacks.results.history import HistoryRow

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["HEIGHT_PX", "TITLE", "WIDTH_PX", "history_figure", "plot_history"]

WIDTH_PX, HEIGHT_PX = 900, 480
TITLE = "tok/s per stack over time"
_DPI = 100
_SHORTEST_SPAN = timedelta(minutes=2)
"""A shorter time span is widened to this, so one result (or a quick series) has room around it."""


def _by_stack(history: Sequence[HistoryRow]) -> dict[str, list[HistoryRow]]:
    series: dict[str, list[HistoryRow]] = {}
    for row in sorted(history, key=lambda row: row.recorded_at):
        series.setdefault(row.stack, []).append(row)
    return series


def history_figure(history: Sequence[HistoryRow]) -> Figure:
    """The picture as a matplotlib Figure: tok/s from zero, UTC time ticks at round intervals, and
    a legend with each stack's latest tok/s. ValueError when there is nothing to plot."""
    if not history:
        raise ValueError("nothing to plot: the history has no results")
    from matplotlib import dates
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_PX / _DPI, HEIGHT_PX / _DPI), dpi=_DPI, layout="constrained")
    axes = figure.add_subplot()
    for stack, rows in _by_stack(history).items():
        means = [row.result.tok_s_mean for row in rows]
        below = [mean - row.result.tok_s_ci95[0] for mean, row in zip(means, rows, strict=True)]
        above = [row.result.tok_s_ci95[1] - mean for mean, row in zip(means, rows, strict=True)]
        axes.errorbar(
            [dates.date2num(row.recorded_at) for row in rows],
            means,
            yerr=[below, above],
            marker="s",
            linewidth=2,
            capsize=4,
            label=f"{stack}  {means[-1]:.1f}",
        )
    first = min(row.recorded_at for row in history)
    last = max(row.recorded_at for row in history)
    if last - first < _SHORTEST_SPAN:
        first, last = first - (_SHORTEST_SPAN / 2), last + (_SHORTEST_SPAN / 2)
    margin = (last - first) * 0.05
    axes.set_xlim(float(dates.date2num(first - margin)), float(dates.date2num(last + margin)))
    locator = dates.AutoDateLocator(tz=UTC, minticks=3, maxticks=7)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator, tz=UTC))
    axes.set_ylim(bottom=0)
    axes.grid(axis="y", color="0.88")
    axes.set_title(TITLE)
    axes.set_xlabel("time (UTC)")
    axes.set_ylabel("tok/s")
    axes.legend(title="latest tok/s", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return figure


def plot_history(history: Sequence[HistoryRow], png_path: str | os.PathLike[str]) -> Path:
    """Write the picture of ``history`` as a PNG at ``png_path``; returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = history_figure(history)
    FigureCanvasAgg(figure)  # the raster renderer, whatever backend the environment would pick
    target = Path(png_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, format="png")
    return target
