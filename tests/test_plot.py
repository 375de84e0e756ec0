"""The tok/s plot: a PNG of the documented size with a line and a legend entry per stack, faster
stacks higher, time ticks on round times (that matplotlib loads only when a plot is drawn is in
test_cli)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from matplotlib import dates
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from sglang_stacks.results import plot
from sglang_stacks.results.history import HistoryRow
from sglang_stacks.results.stats import BenchmarkResult

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def row(stack: str, when: datetime, tok_s: float) -> HistoryRow:
    result = BenchmarkResult(
        concurrency=1,
        input_len=1024,
        output_len=512,
        repetitions=5,
        tok_s_mean=tok_s,
        tok_s_stdev=0.4,
        tok_s_ci95=(tok_s - 0.5, tok_s + 0.5),
        tok_s_runs=(tok_s,) * 5,
        requests=10,
        errors=0,
    )
    return HistoryRow(
        id=1,
        stack=stack,
        recorded_at=when,
        flags_digest="0123456789abcdef",
        sglang_version="0.5.8",
        launch_command="python -m sglang.launch_server",
        result=result,
    )


def campaign() -> list[HistoryRow]:
    return [
        row("baseline", T0, 82.0),
        row("baseline", T0 + timedelta(hours=2), 89.5),
        row("eagle3-bs128", T0 + timedelta(hours=4), 54.1),
    ]


def pixels(figure: Figure) -> np.ndarray:
    """The figure as the Agg renderer draws it: rows of RGB values from 0 to 255."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[:, :, :3]


def test_writes_a_png_of_the_documented_size(tmp_path: Path) -> None:
    path = plot.plot_history(campaign(), tmp_path / "out" / "history.png")

    png = path.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (plot.WIDTH_PX, plot.HEIGHT_PX)


def test_each_stack_is_a_line_with_its_latest_tok_s_in_the_legend() -> None:
    figure = plot.history_figure(campaign())

    (axes,) = figure.axes
    legend = axes.get_legend()
    assert legend is not None
    assert legend.get_title().get_text() == "latest tok/s"
    assert [text.get_text() for text in legend.get_texts()] == ["baseline  89.5", "eagle3-bs128  54.1"]
    points = {bars.get_label(): len(bars.lines[0].get_xdata()) for bars in axes.containers}  # type: ignore[attr-defined]
    assert points == {"baseline  89.5": 2, "eagle3-bs128  54.1": 1}
    assert axes.get_title() == plot.TITLE
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("time (UTC)", "tok/s")
    assert axes.get_ylim()[0] == 0


def test_faster_stacks_sit_higher_in_their_own_colours() -> None:
    figure = plot.history_figure(campaign())
    image = pixels(figure)
    baseline_colour, eagle3_colour = (
        np.array([round(255 * c) for c in to_rgb(bars.lines[0].get_color())])  # type: ignore[attr-defined]
        for bars in figure.axes[0].containers
    )

    inside = figure.axes[0].get_window_extent()  # the plot area, not the legend beside it

    def top_row(colour: np.ndarray) -> int:
        area = image[:, round(inside.x0) : round(inside.x1)]
        rows = np.nonzero(np.all(area == colour, axis=2))[0]
        assert rows.size > 0
        return int(rows.min())

    assert top_row(baseline_colour) < top_row(eagle3_colour)  # smaller is higher on the picture


@pytest.mark.parametrize(
    ("span", "step"),
    [(timedelta(minutes=4), timedelta(minutes=1)), (timedelta(hours=4), timedelta(hours=1))],
)
def test_time_ticks_fall_on_round_times(span: timedelta, step: timedelta) -> None:
    history = [row("baseline", T0 + timedelta(seconds=7), 82.0), row("baseline", T0 + span, 89.5)]
    figure = plot.history_figure(history)
    pixels(figure)  # ticks are placed when the figure is drawn

    ticks = [dates.num2date(tick, tz=UTC) for tick in figure.axes[0].get_xticks()]
    assert len(ticks) >= 3
    assert all((tick - T0) % step == timedelta(0) for tick in ticks)


def test_a_single_result_still_plots_with_room_around_it() -> None:
    figure = plot.history_figure([row("baseline", T0, 89.5)])

    low, high = (dates.num2date(limit, tz=UTC) for limit in figure.axes[0].get_xlim())
    assert low < T0 < high
    assert high - low >= timedelta(minutes=2)


def test_nothing_to_plot_is_an_error() -> None:
    with pytest.raises(ValueError, match="nothing to plot"):
        plot.history_figure([])
