"""The campaign file (``campaigns/<name>.yaml``) as a whole: a base stack, its axes
(``model_axes``), the workload, a pool of hosts and the study's storage (``model_pool``), the
objectives with their SLO constraints (``model_goals``), the search, budget and early stop
(``model_search``); its JSON Schema (``campaigns/schema.json``) and its reader, whose errors name
the key, the value and the fix.
"""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from sglang_stacks.campaign.model_axes import Axis
from sglang_stacks.campaign.model_goals import ConstraintSpec, NoiseSpec, ObjectiveSpec
from sglang_stacks.campaign.model_pool import PoolHost, check_pool, check_storage
from sglang_stacks.campaign.model_search import BudgetSpec, EarlyStopSpec, SearchSpec
from sglang_stacks.config.docstrings import FileSection
from sglang_stacks.config.spec import BenchmarkSpec
from sglang_stacks.errors import SpecError

__all__ = ["CampaignSpec", "campaign_json_schema", "load_campaign"]


class CampaignSpec(FileSection):
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
    noise: NoiseSpec = Field(default_factory=NoiseSpec)
    """How much results move between launches and hosts, and the smallest difference that counts:
    what the ranking, its verdict and early stop allow for."""
    storage: str | None = Field(default=None, pattern=r"^[a-z0-9+]+://")
    """Where the campaign's Optuna study lives: a database URL such as
    ``postgresql+psycopg://sweep@db.internal:5432/campaigns``, shared by several ``sweep run``
    drivers; default: ``reports/<campaign>/study.db`` (SQLite). Passwords never go here: the
    driver reads them from ``~/.pgpass`` or ``PGPASSWORD``."""

    _workload_keys: frozenset[str] = PrivateAttr(default=frozenset())

    @property
    def goals(self) -> tuple[ObjectiveSpec, ...]:
        """The objectives, one or several."""
        return tuple(self.objectives) if self.objectives else (self.objective,)

    @property
    def workload_keys(self) -> frozenset[str]:
        """The keys the file's ``workload`` writes: a trial's benchmark section holds those alone."""
        return self._workload_keys

    @model_validator(mode="wrap")
    @classmethod
    def _note_workload_keys(cls, data: Any, handler: ModelWrapValidatorHandler[CampaignSpec]) -> CampaignSpec:
        made = handler(data)
        written = data.get("workload") if isinstance(data, dict) else None
        made._workload_keys = frozenset(written) if isinstance(written, dict) else frozenset()
        return made

    @model_validator(mode="after")
    def _pool_is_consistent(self) -> CampaignSpec:
        check_pool(self.pool)
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
        check_storage(self.storage)
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
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        parent = _model_at(loc[:-1])
        allowed = list(_fields_of(parent)) if parent else []
        near = difflib.get_close_matches(loc[-1], allowed, n=1)
        fix = f"did you mean {near[0]}?" if near else f"allowed keys: {', '.join(allowed)}."
        return f"{path}: unknown key. Remove it or rename it: {fix}"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    shown = "" if isinstance(value, dict | list) or error["type"] == "missing" else f" (value {value!r})"
    fix = " Add it." if error["type"] == "missing" else " Change it in the campaign file."
    return f"{path}{shown}: {message}.{fix}"


def _fields_of(model: type) -> dict[str, Any]:
    """The fields of a pydantic model or dataclass, by name."""
    found: dict[str, Any] = getattr(model, "__pydantic_fields__", {})
    return found


def _is_model(kind: object) -> bool:
    return isinstance(kind, type) and bool(_fields_of(kind))


def _model_at(loc: list[str]) -> type | None:
    """The model (or pydantic dataclass) a location's last mapping belongs to, for the keys it
    allows."""
    model: type = CampaignSpec
    for part in loc:
        if part.isdigit():
            continue
        field = _fields_of(model).get(part)
        annotation = getattr(field, "annotation", None)
        inner = [a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type)]
        nested = [a for a in inner if _is_model(a)]
        for candidate in inner:
            nested += [a for a in getattr(candidate, "__args__", ()) if _is_model(a)]
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
