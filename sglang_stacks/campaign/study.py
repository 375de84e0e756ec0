"""A campaign's study: an Optuna study, in an SQLite file in the campaign's report folder
(``reports/<campaign>/study.db``) or in the database the campaign's ``storage`` names (PostgreSQL:
several ``sweep run`` drivers on different machines share one study), opened once its tables are
there, and the heartbeats by which a driver says it still runs its trials. Each Optuna trial is one
suggested candidate, its attributes those of ``attributes``.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
import sqlalchemy.pool
from optuna.storages import RDBStorage
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.errors import SpecError

__all__ = [
    "GRACE_S",
    "HEARTBEAT_S",
    "STUDY_FILE",
    "Heartbeats",
    "asking",
    "database_of",
    "open_storage",
    "open_study",
    "storage_url",
]

STUDY_FILE = "study.db"
"""The default storage: an SQLite file in ``reports/<campaign>/``."""
HEARTBEAT_S = 5
"""How often a driver records that it still runs each of its trials."""
GRACE_S = 30
"""A running trial whose driver was not heard from for this long is stale: its driver died."""
_CREATE_ATTEMPTS = 3


optuna.logging.set_verbosity(optuna.logging.WARNING)  # its INFO line per trial would cut through ours


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


def database_of(study: optuna.Study) -> RDBStorage | None:
    """The database storage under the study (Optuna wraps it in a cache); None for a study in
    memory."""
    storage = getattr(study._storage, "_backend", study._storage)
    return storage if isinstance(storage, RDBStorage) else None


@contextmanager
def asking(study: optuna.Study) -> Iterator[None]:
    """Hold, while the block asks the study for a trial, the lock that makes an ask exclusive among
    the drivers of an SQLite study (a file beside it). Optuna hands a queued trial to one asker by
    changing its state under a row lock, which SQLite does not have: two drivers asking at once
    could both be handed the same queued trial. A database server needs no such lock."""
    database = database_of(study)
    url = database.url if database is not None else ""
    if not url.startswith("sqlite:///"):
        yield
        return
    with open(f"{url.removeprefix('sqlite:///')}.ask.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Heartbeats:
    """This driver's heartbeat for each trial it holds, from the moment it asks for the trial until
    it has told the study the outcome: every ``HEARTBEAT_S`` one thread records, for all of them, that
    the driver still runs them (a study in memory keeps no heartbeat). A trial whose heartbeat is
    older than ``GRACE_S`` is stale: another driver takes it over (``resume``)."""

    def __init__(self, study: optuna.Study) -> None:
        self._record = getattr(study._storage, "record_heartbeat", None)
        self._held: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, trial_id: int) -> None:
        """Beat for ``trial_id`` now and from now on."""
        if self._record is None:
            return
        self._beat(trial_id)
        with self._lock:
            self._held.add(trial_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
                self._thread.start()

    def release(self, trial_id: int) -> None:
        """Stop beating for ``trial_id`` (its outcome is told)."""
        with self._lock:
            self._held.discard(trial_id)

    def close(self) -> None:
        """Stop beating for every trial."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self, trial_id: int) -> None:
        assert self._record is not None
        with contextlib.suppress(SQLAlchemyError):  # a database hiccup: the next beat tries again
            self._record(trial_id)

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock:
                held = sorted(self._held)
            for trial_id in held:
                self._beat(trial_id)
