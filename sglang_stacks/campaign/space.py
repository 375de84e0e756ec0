"""A campaign's axes as the parameters of its Optuna study: a list or zipped axis is a categorical
parameter over its labels, a ``low``/``high`` interval an integer or real one. A trial's parameters
make one ``Candidate``; a candidate's labels give its parameters back (to queue or import it); the
base stack's own point of the axes is where a search opens (``base_params``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from sglang_stacks.campaign.axes import Candidate, apply, candidate_base, combine
from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.campaign.model_axes import Axis
from sglang_stacks.config.spec import BenchmarkSpec

__all__ = ["SearchSpace"]


@dataclass(frozen=True)
class SearchSpace:
    """The campaign's axes as the study's parameters, on the candidates' base sections."""

    campaign: CampaignSpec
    base: dict[str, Any]
    """The sections every candidate starts from (``candidate_base`` of the base stack)."""

    @classmethod
    def of(cls, campaign: CampaignSpec, base_stack: Mapping[str, Any]) -> SearchSpace:
        """The space of ``campaign`` over its base stack's sections."""
        return cls(campaign, candidate_base(campaign, base_stack))

    def distributions(self) -> dict[str, BaseDistribution]:
        """Axis title -> its distribution."""
        return {axis.title: _distribution(axis) for axis in self.campaign.axes}

    def repetitions(self) -> int:
        """How many repetitions each trial's benchmark measures."""
        return BenchmarkSpec.from_section(self.base.get("benchmark") or {}).repetitions

    def size(self) -> int | None:
        """How many combinations the axes make; None when an axis is a real interval without step."""
        counts = [axis.count() for axis in self.campaign.axes]
        return None if None in counts else math.prod(c for c in counts if c is not None)

    def candidate(self, params: Mapping[str, Any]) -> Candidate:
        """The candidate of a trial's parameters (axis title -> label, or number on an interval)."""
        points: dict[str, tuple[str, dict[str, Any]]] = {}
        for axis in self.campaign.axes:
            value = params[axis.title]
            if axis.interval:
                points[axis.title] = axis.value_at(value)
            else:
                points[axis.title] = dict((label, (label, p)) for label, p in axis.points())[str(value)]
        return combine(self.base, points)

    def params(self, labels: Mapping[str, str]) -> dict[str, Any]:
        """A candidate's parameters from its labels (to enqueue or import it); KeyError when the
        labels do not name a point of every axis."""
        found: dict[str, Any] = {}
        for axis in self.campaign.axes:
            label = labels[axis.title]
            if axis.interval:
                found[axis.title] = int(label) if axis.integer else float(label)
            elif label in {point for point, _ in axis.points()}:
                found[axis.title] = label
            else:
                raise KeyError(label)
        return found

    def gpus(self, labels: Mapping[str, str]) -> int:
        """GPUs the server of the candidate with ``labels`` uses (its ``tp_size``); 1 when the labels
        are no point of the axes."""
        try:
            candidate = self.candidate(self.params(labels))
        except KeyError:
            return 1
        return int((candidate.sections.get("server") or {}).get("tp_size") or 1)

    def base_params(self) -> dict[str, Any]:
        """The base stack's parameters: on each list or zipped axis the point that leaves the base's
        sections as they are (the axis's first point when none does), on an interval the base's
        value when it is one of the interval's (else its low end)."""
        found: dict[str, Any] = {}
        for axis in self.campaign.axes:
            if axis.interval:
                assert axis.key is not None and axis.low is not None
                value = _value_at(self.base, axis.key)
                found[axis.title] = value if _on(axis, value) else axis.low
                continue
            points = axis.points()
            same = (label for label, assignments in points if apply(self.base, assignments) == self.base)
            found[axis.title] = next(same, points[0][0])
        return found

    def flags(self, candidate: Candidate) -> dict[str, str]:
        """The keys the candidate sets to something else than the base stack has, with its labels."""
        changed: dict[str, str] = {}
        for key, value in candidate.assignments.items():
            node = _value_at(self.base, key)
            unset = value is None or value == "auto"
            if (node is None and not unset) or (node is not None and node != value):
                changed[key] = "auto" if unset else ("set" if isinstance(value, dict) else str(value))
        return changed


def _value_at(sections: Mapping[str, Any], key: str) -> Any:
    """The value a dotted key has in ``sections``; None when unset."""
    node: Any = sections
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _on(axis: Axis, value: Any) -> bool:
    """Whether ``value`` is a value of the interval ``axis`` (inside it, on its step)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    assert axis.low is not None and axis.high is not None
    if not axis.low <= value <= axis.high or (axis.integer and not float(value).is_integer()):
        return False
    return (
        axis.step is None
        or abs((value - axis.low) / axis.step - round((value - axis.low) / axis.step)) < 1e-9
    )


def _distribution(axis: Axis) -> BaseDistribution:
    if not axis.interval:
        return CategoricalDistribution([label for label, _ in axis.points()])
    assert axis.low is not None and axis.high is not None
    if axis.integer:
        step = int(axis.step or 1)
        high = int(axis.low + (int(axis.high) - int(axis.low)) // step * step)
        return IntDistribution(int(axis.low), high, log=axis.log, step=step)
    high_value = float(axis.high)
    if axis.step is not None:  # Optuna wants high on the grid of low + k * step
        count = axis.count()
        assert count is not None
        high_value = float(axis.low) + (count - 1) * float(axis.step)
    return FloatDistribution(float(axis.low), high_value, log=axis.log, step=axis.step)
