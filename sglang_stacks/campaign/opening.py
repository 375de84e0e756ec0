"""How a TPE search opens: from the base stack, one axis at a time, before the model takes over.

An engineer tuning a server starts from the configuration they run and changes one flag at a time,
keeping a change that helps, and does not try what they already know to be slower. The opening does
the same with the campaign's base stack: its first suggestion is the base's own point of the axes
(or, on an axis whose points do not include the base's value, the axis's first point). Then it
walks the axes once, in the file's order (but see below): each other point of an axis (an interval's low end,
middle and high end) with the rest of the best configuration so far, the incumbent; once an axis is
walked, the incumbent moves to its best point if that is better than the incumbent by more than
``margin`` (a relative difference: two launches of one configuration differ by about that much, so
a smaller lead is noise), or to its best feasible point when the incumbent itself was not measured.
A point that preflight discards, or keeps with a warning that it serves the workload slower, is
passed over: the opening launches only what preflight has nothing against. After the last axis
the sampler's model (multivariate TPE) suggests the rest, every point included, with every trial of
the opening as its history instead of random suggestions.

When the memory plan says the incumbent's KV pool holds fewer of the workload's streams at once
than it runs, the pool is what limits the server, and an engineer would see to it first: while the
incumbent is so limited, the opening walks next the axis on which some point admits the most
streams (ties in the file's order), and along it tries first the points that admit the most. Once
the incumbent's pool holds every stream, the pool no longer limits it, and the axes left are walked
in the file's order. Along an axis walked for the pool (one on which some point admits more streams
than the limited incumbent), a point that admits fewer streams than the best point measured on it is
passed over, as a point preflight warns is slower is: once the point that holds the most streams is
measured and is the best, the walk goes on to the next axis from it instead of trying smaller pools
that only hold fewer; and once the best point measured on it holds every stream, the axis has done
what it was walked for, and its points left (more pool than the streams need) are passed over too.

The walk is replayed from the study's trials at each suggestion, so a resumed campaign, or several
drivers sharing the study, open where the study stands; a point another worker is running counts
as taken, and a point already measured (by the opening or not) is not launched again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

__all__ = ["OpeningSampler", "Preview", "axis_points"]


def axis_points(distribution: BaseDistribution) -> list[Any]:
    """The points the opening tries on an axis: every choice of a list, an interval's low end,
    middle (geometric with ``log``) and high end."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    assert isinstance(distribution, IntDistribution | FloatDistribution)
    low, high = distribution.low, distribution.high
    middle = math.sqrt(low * high) if distribution.log else (low + high) / 2
    if distribution.step is not None:
        middle = low + round((middle - low) / distribution.step) * distribution.step
    if isinstance(distribution, IntDistribution):
        middle = round(middle)
    return list(dict.fromkeys([low, middle, high]))


class Preview(NamedTuple):
    """What is known of a point before it is launched."""

    clean: bool
    """Preflight keeps it without a warning that it serves the workload slower."""
    admitted: float
    """The share of the workload's streams its KV pool and running limit hold at once, by the
    memory plan: 1.0 when they hold them all or the plan cannot say."""


def _unknown(params: Mapping[str, Any]) -> Preview:
    return Preview(True, 1.0)


class OpeningSampler(BaseSampler):
    """Suggests the opening's points (``next_point``) while it has any, then defers to ``model``."""

    def __init__(
        self,
        distributions: Mapping[str, BaseDistribution],
        start: Mapping[str, Any],
        model: BaseSampler,
        margin: float,
        preview: Callable[[Mapping[str, Any]], Preview] = _unknown,
    ) -> None:
        self.distributions = dict(distributions)
        self.start = dict(start)
        """The base stack's parameters: its label on each axis (its value on an interval)."""
        self.model = model
        self.margin = margin
        self._preview = preview
        self._previews: dict[tuple[Any, ...], Preview] = {}
        self._planned: dict[int, dict[str, Any] | None] = {}

    def next_point(self, trials: Sequence[FrozenTrial], direction: StudyDirection) -> dict[str, Any] | None:
        """The opening's next parameters given the study's ``trials``, or None once it walked every
        axis."""
        taken: set[tuple[Any, ...]] = set()
        values: dict[tuple[Any, ...], float | None] = {}
        for trial in sorted(trials, key=lambda t: t.number):
            if not trial.params or trial.state == TrialState.FAIL:
                continue
            key = self._key(trial.params)
            taken.add(key)
            values.setdefault(key, _feasible_value(trial))
        incumbent = dict(self.start)
        if self._key(incumbent) not in taken and self.clean(incumbent):
            return incumbent
        sign = 1.0 if direction == StudyDirection.MAXIMIZE else -1.0
        walked: list[str] = []
        while (name := self._next_axis(incumbent, walked)) is not None:
            walked.append(name)
            walk = [incumbent | {name: point} for point in self._points(name, incumbent)]
            measured = [(value, p) for p in walk if (value := values.get(self._key(p))) is not None]
            best = max(measured, key=lambda item: sign * item[0]) if measured else None
            floor = self._pool_floor(incumbent, walk, None if best is None else best[1])
            untried = next(
                (
                    p
                    for p in walk
                    if self._key(p) not in taken and self.clean(p) and self.preview(p).admitted >= floor
                ),
                None,
            )
            if untried is not None:
                return untried
            if best is None:
                continue
            value, point = best
            held = values.get(self._key(incumbent))
            if held is None or sign * (value - held) > self.margin * abs(held):
                incumbent = point
        return None

    def _pool_floor(
        self, incumbent: Mapping[str, Any], walk: Sequence[Mapping[str, Any]], best: Mapping[str, Any] | None
    ) -> float:
        """The fewest streams (as a share) a point of this axis must admit to be tried: on an axis
        walked for the pool (the incumbent's pool limits it and some point admits more), what the
        best point measured on it admits, since a smaller pool only holds fewer of the streams that
        already do not fit, and more than every stream (none is tried) once that point holds them
        all; otherwise none."""
        if best is None or not self._limited(incumbent):
            return 0.0
        held = self.preview(incumbent).admitted
        if all(self.preview(p).admitted <= held for p in walk):
            return 0.0
        admitted = self.preview(best).admitted
        return math.inf if admitted >= 1.0 else admitted

    def _limited(self, params: Mapping[str, Any]) -> bool:
        return self.preview(params).admitted < 1.0

    def _next_axis(self, incumbent: Mapping[str, Any], walked: Sequence[str]) -> str | None:
        """The axis walked after ``walked`` from ``incumbent``, None once every axis is: the file's
        next, or, while the incumbent's pool limits it, the one on which a point admits the most
        streams (ties in the file's order)."""
        left = [name for name in self.distributions if name not in walked]
        if not left or not self._limited(incumbent):
            return next(iter(left), None)

        def most(name: str) -> float:
            return max(
                self.preview({**incumbent, name: p}).admitted for p in axis_points(self.distributions[name])
            )

        return max(left, key=most)

    def _points(self, name: str, incumbent: Mapping[str, Any]) -> list[Any]:
        """The points of axis ``name`` in the order they are tried from ``incumbent``: the file's,
        or, when the incumbent's pool limits it, the points that admit the most first."""
        points = axis_points(self.distributions[name])
        if not self._limited(incumbent):
            return points
        return sorted(points, key=lambda p: self.preview({**incumbent, name: p}).admitted, reverse=True)

    def preview(self, params: Mapping[str, Any]) -> Preview:
        """What is known of the point before a launch (worked out once per point)."""
        key = self._key(params)
        if key not in self._previews:
            self._previews[key] = self._preview(params)
        return self._previews[key]

    def clean(self, params: Mapping[str, Any]) -> bool:
        """Whether preflight keeps the point with nothing against it."""
        return self.preview(params).clean

    def _key(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(params.get(name) for name in self.distributions)

    def _plan(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any] | None:
        if trial.number not in self._planned:
            others = [t for t in study.get_trials(deepcopy=False) if t.number != trial.number]
            self._planned = {trial.number: self.next_point(others, study.direction)}
        return self._planned[trial.number]

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        if self._plan(study, trial) is not None:
            return dict(self.distributions)
        return self.model.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        point = self._plan(study, trial)
        if point is not None:
            return {name: point[name] for name in search_space}
        return self.model.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self.model.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.model.before_trial(study, trial)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self.model.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.model.reseed_rng()


def _feasible_value(trial: FrozenTrial) -> float | None:
    """A complete trial's value when it met every constraint; None otherwise (discarded, failed,
    missed an SLO, stopped early, still running)."""
    if trial.state != TrialState.COMPLETE or trial.value is None:
        return None
    if any(value > 0 for value in trial.constraints.values()):
        return None
    return trial.value
