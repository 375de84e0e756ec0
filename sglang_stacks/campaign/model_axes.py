"""A campaign's axes (``axes:`` in its file): each varies a key over ``values``, a ``range`` or a
numeric interval, or a ``zip`` of keys whose values go together; its points as labels and assignments.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, model_validator

from sglang_stacks.config.docstrings import FileSection

__all__ = ["AXIS_ROOTS", "NAME_PATTERN", "Axis", "RangeSpec"]

AXIS_ROOTS = ("server", "environment", "fleet", "draftModel")
"""Sections an axis may vary. The host comes from the pool and the workload from ``workload``,
so every trial of a campaign is measured the same way."""

_KEY = r"^(server|environment|fleet|draftModel)(\.[A-Za-z_][A-Za-z0-9_]*)*$"
NAME_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
"""A name a person gives in a campaign file (a zipped axis, a pool host): lowercase, digits, dashes."""


class RangeSpec(FileSection):
    """Numbers from ``start`` up to and including ``stop``, ``step`` apart."""

    start: float
    stop: float
    step: float = Field(gt=0)

    def values(self) -> list[float | int]:
        """The range's values; integers when start and step are whole numbers."""
        count = int((self.stop - self.start) / self.step + 1e-9) + 1
        whole = float(self.start).is_integer() and float(self.step).is_integer()
        found = [self.start + i * self.step for i in range(max(count, 0))]
        return [int(v) if whole else round(v, 6) for v in found]


class Axis(FileSection):
    """One dimension of the search: a key with ``values``, a ``range`` of values, or a numeric
    interval (``low``/``high``, with an optional ``step`` and ``log``), or a ``zip`` of keys whose
    values go together (speculative steps, top-k and draft tokens), one point per position.

    A value ``auto`` or null leaves the key unset, so SGLang (or the base stack) decides.
    """

    key: str | None = Field(default=None, pattern=_KEY)
    """The varied key, as ``section.field``: ``server.cuda_graph_max_bs``, ``environment.env.NCCL_ALGO``."""
    values: list[Any] | None = Field(default=None, min_length=1)
    """The values the key takes."""
    range: RangeSpec | None = None
    """The values as a range, instead of ``values``."""
    low: int | float | None = None
    """A numeric interval's smallest value (with ``high``): whole numbers make an integer axis."""
    high: int | float | None = None
    """A numeric interval's largest value, included."""
    step: int | float | None = Field(default=None, gt=0)
    """The interval's step (default 1 for an integer axis; none for a real one: any value)."""
    log: bool = False
    """Sample the interval on a log scale (a searching strategy tries small values as often as large)."""
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    """A zipped axis's name (a key axis is named by its key), used in stack labels and the report."""
    zip: dict[str, list[Any]] | None = None
    """Keys (``section.field``, or ``draftModel`` for the whole section) to lists of equal length."""
    labels: list[str] | None = None
    """A zipped axis's label for each point, like ``off`` or ``2-4-4``."""

    @model_validator(mode="after")
    def _one_form(self) -> Axis:
        numeric = self.low is not None or self.high is not None or self.step is not None or self.log
        if self.zip is not None:
            if self.key is not None or self.values is not None or self.range is not None or numeric:
                raise ValueError(
                    "a zipped axis has name and zip (and labels); remove key, values, range, low, high, "
                    "step and log"
                )
            if self.name is None:
                raise ValueError("a zipped axis needs a name, like name: speculative")
            lengths = {len(v) for v in self.zip.values()}
            if not self.zip or len(lengths) != 1 or 0 in lengths:
                raise ValueError("zip needs at least one key, and every list of the same, non-zero length")
            bad = [k for k in self.zip if not re.match(_KEY, k)]
            if bad:
                raise ValueError(f"zip keys {', '.join(bad)} must start with one of {', '.join(AXIS_ROOTS)}")
            if self.labels is not None:
                if len(self.labels) != lengths.pop():
                    raise ValueError("labels needs one label per zipped point")
                if len(set(self.labels)) != len(self.labels):
                    raise ValueError(f"labels {self.labels} repeat one; give each point its own label")
            return self
        if self.key is None:
            raise ValueError("an axis needs key with values (or range, or low and high), or name with zip")
        if self.name is not None or self.labels is not None:
            raise ValueError(f"axis {self.key}: name and labels belong to zipped axes; remove them")
        forms = [self.values is not None, self.range is not None, numeric]
        if sum(forms) != 1:
            raise ValueError(f"axis {self.key} needs exactly one of values, range, or low and high")
        if numeric:
            self._check_interval()
        return self

    def _check_interval(self) -> None:
        if self.low is None or self.high is None:
            raise ValueError(f"axis {self.key} needs both low and high (step and log are optional)")
        if self.low >= self.high:
            raise ValueError(f"axis {self.key}: low {self.low} must be below high {self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"axis {self.key}: log needs low above 0 (it is {self.low})")
        if self.log and self.step is not None and not (self.integer and self.step == 1):
            raise ValueError(f"axis {self.key}: log and step do not go together; remove one of them")
        if self.step is not None and self.integer and not float(self.step).is_integer():
            raise ValueError(
                f"axis {self.key}: step {self.step} is not whole while low and high are; write low and "
                "high as decimals (like 0.5) for a real-valued axis"
            )

    @property
    def title(self) -> str:
        """What the report calls the axis."""
        return self.name or str(self.key)

    @property
    def interval(self) -> bool:
        """A numeric interval (``low``/``high``) rather than a list of points."""
        return self.low is not None

    @property
    def integer(self) -> bool:
        """An interval of whole numbers: ``low`` and ``high`` (and ``step``) written as integers."""
        return all(isinstance(v, int) for v in (self.low, self.high, self.step) if v is not None)

    def count(self) -> int | None:
        """How many points the axis has; None for a real interval without a step (any value)."""
        if not self.interval:
            return len(self.points())
        assert self.low is not None and self.high is not None  # guaranteed by _one_form
        step = self.step if self.step is not None else (1 if self.integer else None)
        if step is None:
            return None
        return int((self.high - self.low) / step + 1e-9) + 1

    def value_at(self, value: int | float) -> tuple[str, dict[str, Any]]:
        """An interval's point for ``value``: its label and assignment."""
        assert self.key is not None  # an interval is a key axis
        number: int | float = round(value) if self.integer else round(float(value), 6)
        return _label(number), {self.key: number}

    def points(self) -> list[tuple[str, dict[str, Any]]]:
        """Each point as (label, assignments of keys to values); an interval's, when it has a step
        (or is whole), else ValueError."""
        if self.zip is not None:
            count = len(next(iter(self.zip.values())))
            labels = self.labels or [
                "/".join(_label(values[i]) for values in self.zip.values()) for i in range(count)
            ]
            return [(labels[i], {k: v[i] for k, v in self.zip.items()}) for i in range(count)]
        assert self.key is not None  # guaranteed by _one_form
        if self.interval:
            points = self.count()
            if points is None:
                raise ValueError(f"axis {self.key} is a real interval without a step: it lists no points")
            assert self.low is not None
            step = self.step if self.step is not None else 1
            return [self.value_at(self.low + i * step) for i in range(points)]
        values = self.values if self.values is not None else (self.range.values() if self.range else [])
        by_label: dict[str, tuple[str, dict[str, Any]]] = {}
        for value in values:  # two values with one label (null and auto) are one point
            by_label.setdefault(_label(value), (_label(value), {self.key: value}))
        return list(by_label.values())


def _label(value: object) -> str:
    if value is None or value == "auto":
        return "auto"
    if isinstance(value, dict):
        return "set"
    return str(value).lower() if isinstance(value, bool) else str(value)
