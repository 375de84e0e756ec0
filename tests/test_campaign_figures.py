"""The report's search figures, from trial records as the study holds them: the serving plane's
curves and Pareto frontier (tok/s per GPU against tok/s per user), the search history with the best
so far, and the PNGs drawn from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.image import imread

from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.figures import draw_history, draw_serving
from sglang_stacks.campaign.frontier import (
    HistoryPoint,
    best_so_far,
    frontier,
    search_history,
    serving_curve,
    serving_curves,
    titles,
)
from sglang_stacks.results.stats import BenchmarkResult


def level(concurrency: int, tok_s: float) -> BenchmarkResult:
    return BenchmarkResult.model_validate(
        {
            "concurrency": concurrency,
            "input_len": 32,
            "output_len": 64,
            "repetitions": 2,
            "tok_s_mean": tok_s,
            "tok_s_stdev": 1.0,
            "tok_s_ci95": (tok_s - 9, tok_s + 9),
            "tok_s_runs": (tok_s - 0.5, tok_s + 0.5),
            "requests": 2 * concurrency,
            "errors": 0,
        }
    )


def record(number: int, stack: str, status: str, **fields: Any) -> TrialRecord:
    return TrialRecord.model_validate(
        {
            "number": number,
            "trial_id": number + 1,
            "stack": stack,
            "labels": {"server.cuda_graph_max_bs": stack.rsplit("-", 1)[-1]},
            "status": status,
            "state": "COMPLETE",
            "constraints": {"preflight": 0.0, "launch": 0.0},
        }
        | fields
    )


def test_the_frontier_keeps_the_points_no_feasible_point_beats_on_both_axes() -> None:
    # On 2 GPUs: per GPU is tok/s / 2, per user tok/s / concurrency.
    a = serving_curve("c-a", {"bs": "128"}, [level(1, 90), level(8, 400)], 2)
    b = serving_curve("c-b", {"bs": "512"}, [level(8, 480), level(1, 80)], 2)
    c = serving_curve("c-c", {"bs": "64"}, [level(1, 100)], 2, feasible=False)
    assert [p.level for p in b.points] == ["c=1", "c=8"]  # light load first, whatever the order measured
    assert (b.points[1].tok_s_per_user, b.points[1].tok_s_per_gpu) == (60.0, 240.0)
    front = frontier([a, b, c])
    # a at c=1 (90 per user) and b at c=8 (240 per GPU); b at c=1 is beaten by a at c=1, a at c=8 by
    # b at c=8; c is faster per user but missed a constraint.
    assert [(curve.stack, point.level) for curve, point in front] == [("c-a", "c=1"), ("c-b", "c=8")]


def test_configurations_are_named_by_the_axes_that_set_them_apart() -> None:
    a = serving_curve("c-a", {"server.cuda_graph_max_bs": "128", "server.tp_size": "8"}, [level(1, 90)], 8)
    b = serving_curve("c-b", {"server.cuda_graph_max_bs": "512", "server.tp_size": "8"}, [level(1, 80)], 8)
    assert titles([a, b]) == {"c-a": "cuda_graph_max_bs=128", "c-b": "cuda_graph_max_bs=512"}


def test_the_best_so_far_counts_only_trials_within_every_constraint() -> None:
    points = [
        HistoryPoint(0, 80.0, "feasible"),
        HistoryPoint(1, 95.0, "infeasible"),
        HistoryPoint(2, None, "discarded"),
        HistoryPoint(3, 88.0, "feasible"),
        HistoryPoint(4, 70.0, "feasible"),
    ]
    assert best_so_far(points, maximize=True) == [80.0, 80.0, 80.0, 88.0, 88.0]
    assert best_so_far(points, maximize=False) == [80.0, 80.0, 80.0, 80.0, 70.0]
    assert best_so_far(points[1:3], maximize=True) == [None, None]


def test_the_history_says_what_came_of_each_suggestion_and_leaves_out_repeats() -> None:
    levels = [level(1, 90)]
    records = [
        record(3, "c-128", "done", values=(88.0,), levels=levels),
        record(0, "c-64", "done", values=(95.0,), levels=levels, constraints={"slo": 0.2}),
        record(1, "c-512", "infeasible", values=(0.0,), constraints={"preflight": 1.0}),
        record(2, "c-256", "failed", values=(0.0,), constraints={"launch": 1.0}),
        record(4, "c-128", "duplicate", values=(88.0,)),
        record(5, "c-96", "done", state="PRUNED", levels=levels, stopped_early="clearly worse"),
        record(6, "c-32", "running", state="RUNNING"),
        record(7, "c-48", "interrupted", state="FAIL"),
    ]
    history = search_history(records)
    assert [(p.number, p.value, p.kind) for p in history] == [
        (0, 95.0, "infeasible"),
        (1, None, "discarded"),
        (2, None, "failed"),
        (3, 88.0, "feasible"),
        (5, None, "stopped"),
    ]
    # Curves for what measured its levels: the SLO miss (drawn, off the frontier) and the early stop too.
    assert {(c.stack, c.feasible) for c in serving_curves(records)} == {
        ("c-128", True),
        ("c-64", False),
        ("c-96", True),
    }


@pytest.mark.parametrize("maximize", [True, False])
def test_the_figures_are_written_as_pngs_of_their_size(tmp_path: Path, maximize: bool) -> None:
    curves = [
        serving_curve("c-a", {"bs": "128"}, [level(1, 90), level(8, 400)], 8),
        serving_curve("c-b", {"bs": "512"}, [level(1, 80), level(8, 480)], 8, feasible=maximize),
    ]
    serving = imread(draw_serving(curves, tmp_path / "pareto.png"))
    history = imread(
        draw_history(
            [HistoryPoint(0, 80.0, "feasible"), HistoryPoint(1, None, "failed")],
            objective="tok/s at concurrency 1",
            maximize=maximize,
            path=tmp_path / "history.png",
        )
    )
    assert serving.shape[:2] == (572, 880)  # 8 x 5.2 inches at 110 dpi
    assert history.shape[:2] == (462, 880)
