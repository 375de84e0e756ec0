"""The campaign file (``campaigns/<name>.yaml``): a base stack, axes to vary, the workload, a pool
of hosts, an objective and a budget, as frozen pydantic models whose JSON Schema is
``campaigns/schema.json``. Every key is checked; an error names the key, the value and the fix.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sglang_stacks.config.docstrings import describe_fields
from sglang_stacks.config.spec import BenchmarkSpec, HostSpec
from sglang_stacks.errors import SpecError

__all__ = [
    "AXIS_ROOTS",
    "Axis",
    "BudgetSpec",
    "CampaignSpec",
    "EarlyStopSpec",
    "ObjectiveSpec",
    "PoolHost",
    "RangeSpec",
    "campaign_json_schema",
    "load_campaign",
]

AXIS_ROOTS = ("server", "environment", "draftModel")
"""Sections an axis may vary. The host comes from the pool and the workload from ``workload``,
so every trial of a campaign is measured the same way."""

_KEY = r"^(server|environment|draftModel)(\.[A-Za-z_][A-Za-z0-9_]*)*$"
_NAME = r"^[a-z0-9][a-z0-9-]*$"


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=describe_fields)


class RangeSpec(_Section):
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


class Axis(_Section):
    """One dimension of the search: a key with ``values`` or a ``range``, or a ``zip`` of keys
    whose values go together (speculative steps, top-k and draft tokens), one point per position.

    A value ``auto`` or null leaves the key unset, so SGLang (or the base stack) decides.
    """

    key: str | None = Field(default=None, pattern=_KEY)
    """The varied key, as ``section.field``: ``server.cuda_graph_max_bs``, ``environment.env.NCCL_ALGO``."""
    values: list[Any] | None = Field(default=None, min_length=1)
    """The values the key takes."""
    range: RangeSpec | None = None
    """The values as a range, instead of ``values``."""
    name: str | None = Field(default=None, pattern=_NAME)
    """A zipped axis's name (a key axis is named by its key), used in stack labels and the report."""
    zip: dict[str, list[Any]] | None = None
    """Keys (``section.field``, or ``draftModel`` for the whole section) to lists of equal length."""
    labels: list[str] | None = None
    """A zipped axis's label for each point, like ``off`` or ``2-4-4``."""

    @model_validator(mode="after")
    def _one_form(self) -> Axis:
        if self.zip is not None:
            if self.key is not None or self.values is not None or self.range is not None:
                raise ValueError("a zipped axis has name and zip (and labels); remove key, values and range")
            if self.name is None:
                raise ValueError("a zipped axis needs a name, like name: speculative")
            lengths = {len(v) for v in self.zip.values()}
            if not self.zip or len(lengths) != 1 or 0 in lengths:
                raise ValueError("zip needs at least one key, and every list of the same, non-zero length")
            bad = [k for k in self.zip if not re.match(_KEY, k)]
            if bad:
                raise ValueError(f"zip keys {', '.join(bad)} must start with one of {', '.join(AXIS_ROOTS)}")
            if self.labels is not None and len(self.labels) != lengths.pop():
                raise ValueError("labels needs one label per zipped point")
            return self
        if self.key is None:
            raise ValueError("an axis needs key with values (or range), or name with zip")
        if (self.values is None) == (self.range is None):
            raise ValueError(f"axis {self.key} needs exactly one of values and range")
        if self.name is not None or self.labels is not None:
            raise ValueError(f"axis {self.key}: name and labels belong to zipped axes; remove them")
        return self

    @property
    def title(self) -> str:
        """What the report calls the axis."""
        return self.name or str(self.key)

    def points(self) -> list[tuple[str, dict[str, Any]]]:
        """Each point as (label, assignments of keys to values)."""
        if self.zip is not None:
            count = len(next(iter(self.zip.values())))
            labels = self.labels or [
                "/".join(_label(values[i]) for values in self.zip.values()) for i in range(count)
            ]
            return [(labels[i], {k: v[i] for k, v in self.zip.items()}) for i in range(count)]
        assert self.key is not None  # guaranteed by _one_form
        values = self.values if self.values is not None else (self.range.values() if self.range else [])
        return [(_label(value), {self.key: value}) for value in values]


def _label(value: object) -> str:
    if value is None or value == "auto":
        return "auto"
    if isinstance(value, dict):
        return "set"
    return str(value).lower() if isinstance(value, bool) else str(value)


class PoolHost(_Section):
    """One host of the pool: its host section, as in a stack file, and the server port it uses."""

    name: str = Field(pattern=_NAME)
    """Short name shown in the progress table and the report."""
    host: HostSpec
    """The ``sglang-stacks:host`` section of the trials that run here."""
    port: int = Field(default=30000, ge=1, le=65535)
    """The server's port on this host (hosts sharing an address need different ports)."""
    emulator_state_dir: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_./~-]+$")
    """Where this host's emulated GPUs record their memory (emulator hosts on one machine need
    their own folder each, like their own ``host.state_dir``)."""
    ssh_key_stack: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    """The stack whose ``sshPrivateKey`` secret the trials on this host get (ssh only; default: the
    campaign's ``base``). ``sweep run`` copies it to each trial stack as a secret, encrypted for
    that stack; the key itself never appears in the campaign, a command line or a log."""

    @model_validator(mode="after")
    def _key_needs_ssh(self) -> PoolHost:
        if self.ssh_key_stack is not None and not self.host.needs_ssh_key:
            raise ValueError(
                "ssh_key_stack applies to a host of kind: ssh only; remove it or set host.kind: ssh"
            )
        return self

    def key_stack(self, base: str) -> str | None:
        """The stack to copy the SSH key from; None when the host needs none."""
        return (self.ssh_key_stack or base) if self.host.needs_ssh_key else None


class ObjectiveSpec(_Section):
    """What the ranking maximizes. ``tok_s``: output tokens per second at ``concurrency``."""

    metric: Literal["tok_s"] = "tok_s"
    """The objective's kind; ``sglang_stacks.campaign.objective`` scores each kind."""
    concurrency: int = Field(default=1, ge=1)
    """The benchmark's concurrency level the objective reads (a level of the workload)."""


class BudgetSpec(_Section):
    """How much the sweep may spend: trials run in plan order until either limit is reached."""

    max_trials: int | None = Field(default=None, ge=1)
    """At most this many trials (kept candidates beyond it are reported as over budget)."""
    max_hours: float | None = Field(default=None, gt=0)
    """No new trial starts after this many hours of sweeping (resumed sweeps count their earlier time)."""


class EarlyStopSpec(_Section):
    """Fewer repetitions for a candidate clearly worse than the best so far: each trial measures
    ``after_repetitions`` first, and the rest of the workload's repetitions only when the 95 %
    interval of its mean reaches the best full trial's."""

    after_repetitions: int = Field(default=2, ge=2)
    """Repetitions measured before the comparison (at least 2, for an interval)."""


class CampaignSpec(_Section):
    """A whole campaign file."""

    description: str = ""
    """One line on what the campaign looks for."""
    base: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """The stack (``stacks/Pulumi.<base>.yaml``) every candidate starts from."""
    axes: list[Axis] = Field(min_length=1)
    """The dimensions of the search; candidates are every combination of their points."""
    workload: BenchmarkSpec | None = None
    """The benchmark section of every trial; default: the base stack's."""
    pool: list[PoolHost] = Field(min_length=1)
    """Hosts the trials run on, one trial per host at a time."""
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    """What the ranking maximizes."""
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    """Limits on trials and hours."""
    early_stop: EarlyStopSpec | None = None
    """Stop clearly worse candidates after their first repetitions; default: every trial runs all."""

    @model_validator(mode="after")
    def _pool_is_consistent(self) -> CampaignSpec:
        names = [h.name for h in self.pool]
        if len(set(names)) != len(names):
            raise ValueError(f"pool host names {names} repeat; give each host its own name")
        places = [(h.host.kind, h.host.address, h.port) for h in self.pool]
        if len(set(places)) != len(places):
            raise ValueError("two pool hosts share a host and port; give each its own port")
        dirs = [(h.host.kind, h.host.address, h.host.state_dir) for h in self.pool]
        if len(set(dirs)) != len(dirs):
            raise ValueError("two pool hosts share host.state_dir (and so one GPU claim); give each its own")
        facts = {
            h.host.model_dump(include={"gpu_model", "gpu_count", "compute_capability"}).__repr__()
            for h in self.pool
        }
        if len(facts) > 1:
            raise ValueError("pool hosts differ in GPUs; a campaign compares configurations on like hosts")
        titles = [a.title for a in self.axes]
        if len(set(titles)) != len(titles):
            raise ValueError(f"axes {titles} repeat a key or name; list each once")
        if (
            self.early_stop is not None
            and self.workload is not None
            and self.early_stop.after_repetitions >= self.workload.repetitions
        ):
            raise ValueError(
                f"early_stop.after_repetitions {self.early_stop.after_repetitions} leaves nothing to stop: "
                f"workload.repetitions is {self.workload.repetitions}; make it smaller than that"
            )
        if self.workload is not None and self.objective.concurrency not in self.workload.concurrency:
            raise ValueError(
                f"objective.concurrency {self.objective.concurrency} is not a level of workload.concurrency "
                f"{list(self.workload.concurrency)}; add it there or pick one of them"
            )
        return self


@cache
def campaign_json_schema() -> dict[str, Any]:
    """The JSON Schema of a campaign file (``campaigns/schema.json``)."""
    schema = CampaignSpec.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "sglang-stacks campaign",
        **schema,
    }


def _problem(error: Any, document: Any) -> str:
    loc = [str(p) for p in error["loc"]]
    path = ".".join(loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        parent: type[BaseModel] | None = _model_at(loc[:-1])
        allowed = list(parent.model_fields) if parent else []
        near = difflib.get_close_matches(loc[-1], allowed, n=1)
        fix = f"did you mean {near[0]}?" if near else f"allowed keys: {', '.join(allowed)}."
        return f"{path}: unknown key. Remove it or rename it: {fix}"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    shown = "" if isinstance(value, dict | list) or error["type"] == "missing" else f" (value {value!r})"
    fix = " Add it." if error["type"] == "missing" else " Change it in the campaign file."
    return f"{path}{shown}: {message}.{fix}"


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    """The model a location's last mapping belongs to, for the keys it allows."""
    model: type[BaseModel] = CampaignSpec
    for part in loc:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        inner = [a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type)]
        nested = [a for a in inner if issubclass(a, BaseModel)]
        for candidate in inner:
            nested += [
                a
                for a in getattr(candidate, "__args__", ())
                if isinstance(a, type) and issubclass(a, BaseModel)
            ]
        if not nested:
            return None
        model = nested[0]
    return model


def load_campaign(path: Path) -> CampaignSpec:
    """Read and validate a campaign file; SpecError lists every problem with its key."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"There is no campaign file {path}. Create it, or name one in campaigns/.") from None
    except yaml.YAMLError as error:
        raise SpecError(
            f"{path.name} is not valid YAML ({error}). Fix the syntax at the place shown."
        ) from None
    if not isinstance(document, dict):
        raise SpecError(f"{path.name} must be a mapping with base, axes and pool. See campaigns/seeds.yaml.")
    try:
        return CampaignSpec.model_validate(document)
    except ValidationError as error:
        problems = "\n".join(f"  - {_problem(e, document)}" for e in error.errors())
        raise SpecError(f"Campaign {path.stem!r} has {error.error_count()} problem(s):\n{problems}") from None
