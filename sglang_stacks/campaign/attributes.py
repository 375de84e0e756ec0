"""What a campaign's study says of each trial, declared once: ``TrialAttributes`` (its stack, the
flags it changes, where and by which driver it ran, its tok/s with the 95 % interval, why it failed)
written as the trial's user attributes and read back into the same model, and ``TrialRecord``, a
trial as the report and the ranking read it.

A trial's life: ``running`` (its stack is deployed and benchmarked on a pool host; the driver's
heartbeat keeps it alive), ``measured`` (its result is saved; its stack is being destroyed), then
told to the study: ``done`` (complete, or pruned when it stopped early), ``failed`` (complete and
infeasible: it failed on its host), ``infeasible`` (preflight discarded it: never launched),
``duplicate`` (a candidate already run: its result again, nothing launched). A trial interrupted
(Ctrl-C) or whose driver was killed is told failed (``interrupted``, or its last status) once its
stack is destroyed, and a trial that ``replaces`` it tells its result or runs its candidate again;
so is a trial whose host another stack held (``requeued``: not the candidate's failure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

import optuna
from optuna.trial import FrozenTrial, TrialState
from pydantic import ConfigDict, Field, PlainSerializer, SerializationInfo, ValidationError

from sglang_stacks.campaign.driver import Driver
from sglang_stacks.campaign.model_search import Strategy
from sglang_stacks.errors import SpecError
from sglang_stacks.results.stats import BenchmarkResult
from sglang_stacks.shape import Shape

__all__ = [
    "Driver",
    "StudyAttributes",
    "TrialAttributes",
    "TrialRecord",
    "TrialRecords",
    "TrialStatus",
    "ran",
    "read_attributes",
    "read_study_attributes",
    "records",
    "suggested",
    "write_attributes",
    "write_study_attributes",
]

TrialStatus = Literal[
    "queued", "running", "measured", "done", "failed", "infeasible", "duplicate", "interrupted", "requeued"
]


def _whole(result: BenchmarkResult, info: SerializationInfo) -> dict[str, Any]:
    return result.model_dump(mode=info.mode)


Level = Annotated[BenchmarkResult, PlainSerializer(_whole)]
"""A load level's result as the study keeps it: all its fields, those not measured as null, however
the attributes are dumped (``exclude_defaults`` would drop them from each level too)."""


class TrialAttributes(Shape):
    """What a trial's user attributes hold, one attribute per field, as the dashboard shows them."""

    model_config = ConfigDict(extra="forbid")

    stack: str
    """The trial's stack, ``<campaign>-<digest>``: ``pulumi up -s <stack>`` deploys it again."""
    labels: dict[str, str]
    """Axis -> the candidate's point on it (``server.cuda_graph_max_bs`` -> ``128``)."""
    flags: dict[str, str] = Field(default_factory=dict)
    """The keys whose value differs from the base stack's, with the candidate's value."""
    status: TrialStatus = "running"
    host: str | None = None
    """The pool host it ran on."""
    host_place: str | None = None
    """Where that host's GPUs are, as every driver names them (``hosts.place``): while the trial
    runs, no other trial is started there."""
    host_gpus: int | None = None
    """GPUs of that host: the claim holds them all while the trial runs."""
    gpus: int = 1
    """GPUs the server uses (``tp_size``): what tok/s per GPU divides by."""
    driver: Driver | None = None
    """The ``sweep run`` that runs it."""
    started_at: float | None = None
    finished_at: float | None = None
    gpu_hours: float | None = None
    """Time on its host times the host's GPUs; None for a trial never launched."""
    tok_s: float | None = None
    """Mean output tok/s at the first objective's load level."""
    tok_s_ci95: tuple[float, float] | None = None
    """The 95 % interval of that mean."""
    accept_length: float | None = None
    """Speculative decoding's tokens per verify step, at that level."""
    levels: list[Level] = Field(default_factory=list)
    """The benchmark's result per load level, stored as its JSON: a level saved by an earlier
    version reads as well, its fields added since then at their defaults."""
    cause: str | None = None
    """A failed trial's `sglang_stacks.errors.Cause`, or a discarded one's preflight rule (kept as
    text: a campaign's saved state is read by later versions)."""
    message: str | None = None
    """A failed or discarded trial's explanation."""
    stopped_early: str | None = None
    """Why it measured only its first repetitions (campaign ``early_stop``), or None."""
    violations: list[str] = Field(default_factory=list)
    """Each SLO constraint it missed, with by how much."""
    duplicate_of: int | None = None
    """The earlier trial (number) whose candidate this suggestion repeated."""
    replaces: int | None = None
    """The trial (number) that this one settles or runs again: its driver died before telling it,
    Ctrl-C cut it short, or its host was held by another stack."""

    def with_gpu_hours(self) -> TrialAttributes:
        """These attributes with the trial's GPU time: its time on the host times the host's GPUs."""
        if self.started_at is None or self.finished_at is None:
            return self
        hours = (self.finished_at - self.started_at) / 3600 * (self.host_gpus or 1)
        return self.model_copy(update={"gpu_hours": hours})


class TrialRecord(TrialAttributes):
    """A trial as the report and the ranking read it: its attributes, and the study's own fields."""

    number: int
    trial_id: int
    """The storage's id of the trial (what ``Trial(study, trial_id)`` takes)."""
    state: Literal["RUNNING", "WAITING", "COMPLETE", "PRUNED", "FAIL"]
    datetime_start: datetime | None = None
    values: tuple[float, ...] | None = None
    constraints: dict[str, float] = Field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        """Met every constraint (preflight, the launch, the SLOs)."""
        return all(value <= 0 for value in self.constraints.values())

    @property
    def launched(self) -> bool:
        """It ran on a host: it counts as a GPU trial."""
        return self.gpu_hours is not None


_RAN = {
    "stack",
    "labels",
    "flags",
    "host",
    "host_gpus",
    "gpus",
    "driver",
    "started_at",
    "finished_at",
    "gpu_hours",
    "replaces",
}


def ran(attributes: TrialAttributes, **outcome: Any) -> dict[str, Any]:
    """What the study is told of a trial beside its outcome: where and when it ran (its stack,
    labels, flags, host, driver, times, the trial it replaces), with ``outcome``'s fields, and its
    GPU time."""
    told = TrialAttributes.model_validate(attributes.model_dump(include=_RAN) | outcome).with_gpu_hours()
    return told.model_dump(include=_RAN | set(outcome))


class StudyAttributes(Shape):
    """What the study's own user attributes hold of the whole campaign, one attribute per field."""

    model_config = ConfigDict(extra="forbid")

    elapsed_s: float = 0.0
    """The campaign's time sweeping, over all its runs: what the budget's ``max_hours`` counts."""
    imported_sweep_file: int | None = None
    """How many finished trials of the previous release's ``sweep.json`` were imported; None
    before the import (it happens once)."""
    strategy: Strategy | None = None
    """The strategy the last ``sweep run`` searched with, which its report names (a run's
    ``--max-trials`` can change it from the file's); None in a study saved before it was kept."""


def read_study_attributes(study: optuna.Study) -> StudyAttributes:
    """The campaign's attributes, read back into the model."""
    return StudyAttributes.model_validate(study.user_attrs)


def write_study_attributes(study: optuna.Study, **fields: Any) -> None:
    """Set some of the campaign's attributes, each checked by the model."""
    checked = StudyAttributes.model_validate(fields)
    for key, value in checked.model_dump(mode="json", include=set(fields)).items():
        study.set_user_attr(key, value)


def write_attributes(study: optuna.Study, trial_id: int, **fields: Any) -> None:
    """Set some fields of a running (or waiting) trial's attributes, each checked by the model."""
    # The required fields only stand in for the validation of the ones given.
    checked = TrialAttributes.model_validate({"stack": "", "labels": {}} | fields)
    dumped = checked.model_dump(mode="json", include=set(fields))
    for key, value in dumped.items():
        study._storage.set_trial_user_attr(trial_id, key, value)


def read_attributes(trial: FrozenTrial) -> TrialAttributes:
    """A trial's attributes, read back into the model."""
    return TrialAttributes.model_validate(trial.user_attrs)


_Model = TypeVar("_Model", bound=TrialAttributes)

_WRITTEN_FIRST = frozenset(name for name, info in TrialAttributes.model_fields.items() if info.is_required())
"""What a suggestion's attributes must hold (``stack``, ``labels``): a driver killed as it wrote
them, one by one, leaves a trial without some."""


def _read(study: optuna.Study, trial: FrozenTrial, model: type[_Model], **fields: Any) -> _Model | None:
    """The trial's attributes (and ``fields``) read into ``model``; None while its suggestion is not
    written whole. SpecError when they are not what this version reads."""
    if not trial.user_attrs.keys() >= _WRITTEN_FIRST:
        return None
    try:
        return model.model_validate(trial.user_attrs | fields)
    except ValidationError as error:
        raise SpecError(
            f"Trial {trial.number} of study {study.study_name!r} has attributes this version cannot "
            f"read ({error.error_count()} problem(s), first: {error.errors()[0]['msg']})."
        ) from None


def suggested(study: optuna.Study, trial: FrozenTrial) -> TrialAttributes | None:
    """A trial's attributes; None while its suggestion is not written whole."""
    return _read(study, trial, TrialAttributes)


def _record(study: optuna.Study, trial: FrozenTrial) -> TrialRecord | None:
    """The trial's record; None while its suggestion is not written whole (its driver died right
    then)."""
    return _read(
        study,
        trial,
        TrialRecord,
        number=trial.number,
        trial_id=trial._trial_id,
        state=trial.state.name,
        datetime_start=trial.datetime_start,
        values=trial.values,
        constraints=trial.constraints,
    )


def records(study: optuna.Study, states: tuple[TrialState, ...] | None = None) -> list[TrialRecord]:
    """Every trial of the study (in ``states``) with our attributes, in trial order."""
    found = (_record(study, trial) for trial in study.get_trials(deepcopy=False, states=states))
    return [record for record in found if record is not None]


@dataclass
class TrialRecords:
    """``records`` of one study, read as a search goes: a finished trial's attributes never change
    (the study refuses to), nor a queued one's while it waits, so each is read once and kept, and
    each suggestion reads only the trials running or changed since, not every trial again."""

    study: optuna.Study
    _kept: dict[int, TrialRecord] = field(default_factory=dict)

    def read(self, states: tuple[TrialState, ...] | None = None) -> list[TrialRecord]:
        """Every trial of the study (in ``states``) with our attributes, in trial order."""
        found: list[TrialRecord] = []
        for trial in self.study.get_trials(deepcopy=False, states=states):
            record = self._kept.get(trial._trial_id)
            if record is None or record.state != trial.state.name:
                record = _record(self.study, trial)
            if record is None:
                continue
            if trial.state.is_finished() or trial.state == TrialState.WAITING:
                self._kept[trial._trial_id] = record
            found.append(record)
        return found
