"""How a campaign searches (``search``, ``budget`` and ``early_stop`` in its file): the strategy and
its seed, the limits on what the search may spend, and when a clearly worse candidate stops early.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sglang_stacks.config.docstrings import FileSection

__all__ = ["BudgetSpec", "EarlyStopSpec", "SearchSpec", "Strategy"]

Strategy = Literal["grid", "random", "tpe", "nsga2"]


class SearchSpec(FileSection):
    """How the next candidate is chosen: every kept one in file order (``grid``), at random
    (``random``), by Optuna's TPE (``tpe``) or NSGA-II (``nsga2``, several objectives)."""

    strategy: Strategy | None = None
    """``grid``, ``random``, ``tpe`` or ``nsga2``; default: ``grid`` while the kept candidates fit
    in ``budget.max_trials``, else ``tpe``."""
    seed: int = Field(default=0, ge=0)
    """The sampler's seed: the same seed suggests the same candidates in the same order."""
    startup_trials: int | None = Field(default=None, ge=1)
    """``tpe``: suggestions at random before its model takes over; ``nsga2``: its population size.
    Default: a quarter of ``budget.max_trials`` (at least 4, at most 10) for tpe, 8 for nsga2."""


class BudgetSpec(FileSection):
    """How much the search may spend: no new trial starts once any limit is reached. Only trials
    launched on a host count: candidates preflight discards, and repeated suggestions, cost
    nothing."""

    max_trials: int | None = Field(default=None, ge=1)
    """At most this many trials launched (with ``grid``: kept candidates beyond it are reported as
    over budget)."""
    max_gpu_hours: float | None = Field(default=None, gt=0)
    """At most this much GPU time: each launched trial's time on its host times the host's GPUs."""
    max_hours: float | None = Field(default=None, gt=0)
    """No new trial starts after this many hours of searching (resumed runs count their earlier time)."""


class EarlyStopSpec(FileSection):
    """Fewer repetitions for a candidate clearly worse than the best so far: each trial measures
    ``after_repetitions`` first, and the rest of the workload's repetitions only when the 95 %
    interval of its mean reaches the best full trial's."""

    after_repetitions: int = Field(default=2, ge=2)
    """Repetitions measured before the comparison (at least 2, for an interval)."""
