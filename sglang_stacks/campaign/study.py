"""A campaign's state: an Optuna study, in an SQLite file in the campaign's report folder
(``reports/<campaign>/study.db``) or in the database the campaign's ``storage`` names (PostgreSQL:
several ``sweep run`` drivers on different machines share one study).

Each Optuna trial is one suggested candidate. What a person reads about it (its stack, the flags it
changes, where it ran, its tok/s with the 95 % interval, why it failed) is declared once here,
``TrialAttributes``, written as the trial's user attributes and read back into the same model.
A trial's life: ``running`` (its stack is deployed and benchmarked on a pool host; the driver's
heartbeat keeps it alive), ``measured`` (its result is saved; its stack is being destroyed), then
told to the study: ``done`` (complete, or pruned when it stopped early), ``failed`` (complete and
infeasible: it failed on its host), ``infeasible`` (preflight discarded it: never launched),
``duplicate`` (a candidate already run: its result again, nothing launched). A trial interrupted
(Ctrl-C) or whose driver was killed is told failed (``interrupted``, or its last status) once its
stack is destroyed, and a trial that ``replaces`` it tells its result or runs its candidate again.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import optuna
import sqlalchemy
import sqlalchemy.pool
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.errors import SpecError

__all__ = [
    "GRACE_S",
    "HEARTBEAT_S",
    "STUDY_FILE",
    "Driver",
    "TrialAttributes",
    "TrialRecord",
    "TrialStatus",
    "heartbeat",
    "open_storage",
    "open_study",
    "read_attributes",
    "records",
    "storage_url",
    "write_attributes",
]

STUDY_FILE = "study.db"
"""The default storage: an SQLite file in ``reports/<campaign>/``."""
HEARTBEAT_S = 5
"""How often a driver records that it still runs each of its trials."""
GRACE_S = 30
"""A running trial whose driver was not heard from for this long is stale: its driver died."""
_CREATE_ATTEMPTS = 3

TrialStatus = Literal[
    "queued", "running", "measured", "done", "failed", "infeasible", "duplicate", "interrupted"
]

optuna.logging.set_verbosity(optuna.logging.WARNING)  # its INFO line per trial would cut through ours


class Driver(BaseModel):
    """The ``sweep run`` process that runs a trial: on another machine it is alive while its
    heartbeat is; on this one, while its process is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    machine: str
    pid: int
    start_ticks: int | None = None
    """The process's start time (``/proc/<pid>/stat``), so a reused pid is not taken for it."""

    @classmethod
    def this(cls) -> Driver:
        """This process."""
        return cls(machine=socket.gethostname(), pid=os.getpid(), start_ticks=_start_ticks(os.getpid()))

    def alive_here(self) -> bool | None:
        """Whether the driver still runs, when it ran on this machine; None for another machine."""
        if self.machine != socket.gethostname():
            return None
        if self.start_ticks is None:  # no /proc where it ran: its pid alone says it
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        return _start_ticks(self.pid) == self.start_ticks


def _start_ticks(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot; None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


class TrialAttributes(BaseModel):
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
    levels: list[dict[str, Any]] = Field(default_factory=list)
    """The benchmark's result per load level (``BenchmarkResult`` as JSON)."""
    cause: str | None = None
    """A failed trial's class (the server's: ``out_of_memory``, ``nccl``, ``bad_flag``,
    ``unsupported_gpu``, ``python_missing``, ``port_in_use``, ``crash``, ``hang``,
    ``error_responses``; or ``claim``, ``gate``, ``benchmark``, ``other``), or a discarded one's
    preflight rule."""
    message: str | None = None
    """A failed or discarded trial's explanation."""
    stopped_early: str | None = None
    """Why it measured only its first repetitions (campaign ``early_stop``), or None."""
    violations: list[str] = Field(default_factory=list)
    """Each SLO constraint it missed, with by how much."""
    duplicate_of: int | None = None
    """The earlier trial (number) whose candidate this suggestion repeated."""
    replaces: int | None = None
    """The trial (number) whose driver died before telling it; this one settles or re-runs it."""


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


def records(study: optuna.Study, states: tuple[TrialState, ...] | None = None) -> list[TrialRecord]:
    """Every trial of the study (in ``states``) with our attributes, in trial order."""
    found: list[TrialRecord] = []
    for trial in study.get_trials(deepcopy=False, states=states):
        if "stack" not in trial.user_attrs:
            continue  # asked, but its suggestion was never written (the driver died right then)
        try:
            found.append(
                TrialRecord.model_validate(
                    trial.user_attrs
                    | {
                        "number": trial.number,
                        "trial_id": trial._trial_id,
                        "state": trial.state.name,
                        "datetime_start": trial.datetime_start,
                        "values": trial.values,
                        "constraints": trial.constraints,
                    }
                )
            )
        except ValidationError as error:
            raise SpecError(
                f"Trial {trial.number} of study {study.study_name!r} has attributes this version cannot "
                f"read ({error.error_count()} problem(s), first: {error.errors()[0]['msg']})."
            ) from None
    return found


def storage_url(campaign: CampaignSpec, folder: Path) -> str:
    """The study's database: the campaign's ``storage``, else an SQLite file in ``folder``."""
    return campaign.storage or f"sqlite:///{folder / STUDY_FILE}"


_SCHEMA_LOCK = 0x5354_4B53
"""The PostgreSQL advisory lock (a number every driver agrees on) held while a driver opens the
study database, so that drivers starting at once do not create Optuna's tables at the same time."""


@contextmanager
def _schema_lock(url: str) -> Iterator[None]:
    """Hold the schema lock of a PostgreSQL database while the block runs (other databases: none).

    Optuna creates its tables when it opens an empty database, checking first which exist: two
    drivers doing that at once both create them, and one fails (a duplicate key in PostgreSQL's
    catalogue)."""
    if not url.startswith("postgresql"):
        yield
        return
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": _SCHEMA_LOCK})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": _SCHEMA_LOCK})
    finally:
        engine.dispose()


def open_storage(url: str, *, storage_class: type[RDBStorage] = RDBStorage) -> RDBStorage:
    """The study database at ``url`` (``storage_class``: a subclass that answers some questions its
    own way, like the dashboard's); SpecError naming the URL, without its password, when it cannot
    be opened."""
    # SQLite: worker threads and drivers wait their turn to write; a server: drop dead connections.
    sqlite = url.startswith("sqlite:")
    engine: dict[str, Any] = {"connect_args": {"timeout": 60}} if sqlite else {"pool_pre_ping": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            beats: dict[str, Any] = {"heartbeat_interval": HEARTBEAT_S, "grace_period": GRACE_S}
            with _schema_lock(url):
                for _ in range(_CREATE_ATTEMPTS - 1):
                    try:
                        return storage_class(url, engine_kwargs=engine, **beats)
                    except IntegrityError:
                        # Another driver created the tables at the same moment: they exist now.
                        time.sleep(0.5)
                return storage_class(url, engine_kwargs=engine, **beats)
        except (ImportError, ModuleNotFoundError) as error:
            raise SpecError(
                f"storage {_shown(url)}: its database driver is not installed ({error}). Install it (for "
                "PostgreSQL: pip install 'sglang-stacks[postgres]') or use another URL."
            ) from None
        except SQLAlchemyError as error:  # no connection, no such database, refused
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise SpecError(
                f"storage {_shown(url)} cannot be opened: {first}. Check the URL in the campaign's storage, "
                "that the database runs and that this machine may connect to it."
            ) from None


def _shown(url: str) -> str:
    """The URL without a password (the campaign refuses one, but an environment may add one)."""
    head, _, rest = url.partition("://")
    credentials, at, place = rest.rpartition("@")
    return f"{head}://{credentials.split(':', 1)[0]}{at}{place}" if at else url


def open_study(
    name: str,
    campaign: CampaignSpec,
    folder: Path,
    *,
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
) -> optuna.Study:
    """The campaign's study (created on first use), its directions those of the campaign's
    objectives. SpecError when the study exists with other objectives."""
    url = storage_url(campaign, folder)
    if url.startswith("sqlite:"):
        folder.mkdir(parents=True, exist_ok=True)
    storage = open_storage(url)
    directions = [goal.goal for goal in campaign.goals]
    names = [goal.name for goal in campaign.goals]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            directions=directions,
            sampler=sampler,
            pruner=pruner,
            load_if_exists=True,
        )
        recorded = study.metric_names
        if recorded is None:
            study.set_metric_names(names)
    if recorded is not None and list(recorded) != names:
        raise SpecError(
            f"The study of campaign {name!r} ({_shown(url)}) was made for objectives {list(recorded)}, and "
            f"the campaign now asks for {names}. Keep the objectives, or start a new study: name the "
            f"campaign differently, or move {STUDY_FILE} away."
        )
    return study


@contextmanager
def heartbeat(study: optuna.Study, trial_id: int) -> Iterator[None]:
    """Record, every ``HEARTBEAT_S`` while the block runs, that this driver still runs the trial
    (a study in memory keeps no heartbeat)."""
    record = getattr(study._storage, "record_heartbeat", None)
    if record is None:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            with contextlib.suppress(SQLAlchemyError):  # a database hiccup: the next beat tries again
                record(trial_id)
            if stop.wait(HEARTBEAT_S):
                return

    thread = threading.Thread(target=beat, name=f"heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
