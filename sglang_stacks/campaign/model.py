"""The campaign file (``campaigns/<name>.yaml``): a base stack, axes to vary, the workload, a pool
of hosts, the objective (or several) with its SLO constraints, the search strategy, the budget and
where the study is stored, as frozen pydantic models whose JSON Schema is ``campaigns/schema.json``.
Every key is checked; an error names the key, the value and the fix.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sglang_stacks.config.docstrings import describe_fields
from sglang_stacks.config.spec import BenchmarkSpec, HostSpec
from sglang_stacks.errors import SpecError

__all__ = [
    "AXIS_ROOTS",
    "METRICS",
    "Axis",
    "BudgetSpec",
    "CampaignSpec",
    "ConstraintSpec",
    "EarlyStopSpec",
    "LoadLevel",
    "Metric",
    "ObjectiveSpec",
    "PoolHost",
    "RangeSpec",
    "SearchSpec",
    "Strategy",
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
    name: str | None = Field(default=None, pattern=_NAME)
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


Metric = Literal[
    "tok_s",
    "tok_s_per_gpu",
    "tok_s_per_user",
    "goodput_tok_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p95_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
]
"""What a campaign can optimise or bound, read from one load level of a trial's benchmark: output
tok/s, per GPU the server uses (``tp_size``), per user (per stream: tok/s over the concurrency),
goodput (tok/s of requests within the workload's SLO), and latency percentiles in milliseconds."""
METRICS: tuple[str, ...] = get_args(Metric)

Direction = Literal["maximize", "minimize"]
Strategy = Literal["grid", "random", "tpe", "nsga2"]


class LoadLevel(_Section):
    """One load level of the workload: a closed loop's ``concurrency`` or an open loop's
    ``request_rate``."""

    concurrency: int | None = Field(default=None, ge=1)
    """Concurrent streams (a level of ``workload.concurrency``)."""
    request_rate: float | None = Field(default=None, gt=0)
    """Requests per second (a level of ``workload.request_rate``)."""

    @model_validator(mode="after")
    def _one_level(self) -> LoadLevel:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("a load level is one of concurrency: N or request_rate: R")
        return self

    def describe(self) -> str:
        """The level in words: ``concurrency 16`` or ``4 req/s``."""
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        return f"{self.request_rate:g} req/s"

    @property
    def key(self) -> str:
        """The level in a name: ``concurrency=16`` or ``rate=4``."""
        if self.concurrency is not None:
            return f"concurrency={self.concurrency}"
        return f"rate={self.request_rate:g}"


def _default_direction(metric: str) -> Direction:
    return "minimize" if metric.endswith("_ms") else "maximize"


class ObjectiveSpec(_Section):
    """What the search optimises: a ``metric`` at a load level (``at``), maximised or minimised
    (latencies are minimised, everything else maximised, unless ``direction`` says otherwise)."""

    metric: Metric = "tok_s"
    """The measure: ``tok_s``, ``tok_s_per_gpu``, ``tok_s_per_user``, ``goodput_tok_s``, or a latency
    percentile such as ``ttft_p99_ms`` or ``tpot_p50_ms``."""
    direction: Direction | None = None
    """``maximize`` or ``minimize``; default: minimise latencies (``*_ms``), maximise the rest."""
    at: LoadLevel | None = None
    """The load level the metric is read at, like ``{concurrency: 16}``; default concurrency 1."""
    concurrency: int | None = Field(default=None, ge=1)
    """Shorthand for ``at: {concurrency: N}`` (the form of earlier campaign files)."""

    @model_validator(mode="after")
    def _one_level(self) -> ObjectiveSpec:
        if self.at is not None and self.concurrency is not None:
            raise ValueError("the objective has both at and concurrency; keep at: {concurrency: N} only")
        return self

    @property
    def level(self) -> LoadLevel:
        """The load level the objective reads."""
        if self.at is not None:
            return self.at
        return LoadLevel(concurrency=self.concurrency or 1)

    @property
    def goal(self) -> Direction:
        """Whether larger or smaller is better."""
        return self.direction or _default_direction(self.metric)

    @property
    def name(self) -> str:
        """The objective's name in the study: ``tok_s@concurrency=1``."""
        return f"{self.metric}@{self.level.key}"


class ConstraintSpec(_Section):
    """A service-level objective a trial must meet to count: ``metric`` at a load level at most
    ``max`` (or at least ``min``). A trial that misses one is infeasible, shown with by how much."""

    metric: Metric
    """The bounded measure, like ``ttft_p99_ms`` or ``tok_s_per_user``."""
    at: LoadLevel
    """The load level it is read at, like ``{concurrency: 16}``."""
    max: float | None = None
    """The largest value allowed."""
    min: float | None = None
    """The smallest value allowed."""

    @model_validator(mode="after")
    def _one_bound(self) -> ConstraintSpec:
        if (self.max is None) == (self.min is None):
            raise ValueError(f"the constraint on {self.metric} needs exactly one of max and min")
        return self

    @property
    def name(self) -> str:
        """The constraint's name in the study: ``ttft_p99_ms@concurrency=16<=500``."""
        bound = f"<={self.max:g}" if self.max is not None else f">={self.min:g}"
        return f"{self.metric}@{self.at.key}{bound}"


class SearchSpec(_Section):
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


class BudgetSpec(_Section):
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
    """The benchmark section of every trial; default: the base stack's. One server serves every
    load level of a trial (its ``concurrency`` or ``request_rate`` list)."""
    pool: list[PoolHost] = Field(min_length=1)
    """Hosts the trials run on, one trial per host at a time."""
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    """What the search optimises (default: tok/s at concurrency 1)."""
    objectives: list[ObjectiveSpec] | None = Field(default=None, min_length=2)
    """Several objectives at once instead of ``objective``: the search looks for their Pareto front
    (like tok/s per GPU at high load against tok/s per user at low load)."""
    subject_to: list[ConstraintSpec] = Field(default_factory=list)
    """SLO constraints, like ``{metric: ttft_p99_ms, at: {concurrency: 16}, max: 500}``: a trial
    that misses one is infeasible and never the winner."""
    search: SearchSpec = Field(default_factory=SearchSpec)
    """The search strategy and its seed."""
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    """Limits on trials launched, GPU hours and hours."""
    early_stop: EarlyStopSpec | None = None
    """Stop clearly worse candidates after their first repetitions; default: every trial runs all."""
    storage: str | None = Field(default=None, pattern=r"^[a-z0-9+]+://")
    """Where the campaign's Optuna study lives: a database URL such as
    ``postgresql+psycopg://sweep@db.internal:5432/campaigns``, shared by several ``sweep run``
    drivers; default: ``reports/<campaign>/study.db`` (SQLite). Passwords never go here: the
    driver reads them from ``~/.pgpass`` or ``PGPASSWORD``."""

    @property
    def goals(self) -> tuple[ObjectiveSpec, ...]:
        """The objectives, one or several."""
        return tuple(self.objectives) if self.objectives else (self.objective,)

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
        return self

    @model_validator(mode="after")
    def _search_is_consistent(self) -> CampaignSpec:
        if self.objectives is not None and "objective" in self.model_fields_set:
            raise ValueError("the campaign has both objective and objectives; keep one of them")
        names = [goal.name for goal in self.goals]
        if len(set(names)) != len(names):
            raise ValueError(f"objectives {names} repeat one; list each once")
        early, workload = self.early_stop, self.workload
        if early is not None and workload is not None and early.after_repetitions >= workload.repetitions:
            raise ValueError(
                f"early_stop.after_repetitions {early.after_repetitions} leaves nothing to stop: "
                f"workload.repetitions is {workload.repetitions}; make it smaller than that"
            )
        if self.early_stop is not None and self.objectives is not None:
            raise ValueError(
                "early_stop compares one objective's intervals; with several objectives remove early_stop "
                "(or keep one objective)"
            )
        if self.search.strategy == "grid":
            unlisted = [a.title for a in self.axes if a.count() is None]
            if unlisted:
                raise ValueError(
                    f"search.strategy grid needs a list of points on every axis; {', '.join(unlisted)} is a "
                    "real interval without step: give it a step, or use strategy tpe or random"
                )
        if self.storage is not None and re.match(r"^[a-z0-9+]+://[^/@]*:[^/@]*@", self.storage):
            raise ValueError(
                "storage holds a password, which would sit in plain text in the campaign file; remove it "
                "from the URL and put it in ~/.pgpass (or PGPASSWORD) on each driver's machine"
            )
        if self.workload is not None:
            self._levels_exist(self.workload)
        return self

    def _levels_exist(self, workload: BenchmarkSpec) -> None:
        measured = [
            (f"objectives.{i}" if self.objectives else "objective", goal.level)
            for i, goal in enumerate(self.goals)
        ] + [(f"subject_to.{i}", bound.at) for i, bound in enumerate(self.subject_to)]
        open_loop = workload.arrival != "closed"
        for where, level in measured:
            if level.concurrency is not None and (open_loop or level.concurrency not in workload.concurrency):
                listed = "none (an open loop)" if open_loop else str(list(workload.concurrency))
                raise ValueError(
                    f"{where} reads concurrency {level.concurrency}, which is not a level of "
                    f"workload.concurrency {listed}; add it there or pick one of them"
                )
            if level.request_rate is not None and level.request_rate not in workload.request_rate:
                raise ValueError(
                    f"{where} reads request_rate {level.request_rate:g}, which is not a level of "
                    f"workload.request_rate {list(workload.request_rate)}; add it there or pick one of them"
                )


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
