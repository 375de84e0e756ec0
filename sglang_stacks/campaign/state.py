"""A sweep's progress, kept in ``reports/<campaign>/sweep.json`` so a killed sweep resumes.

Each trial moves ``pending`` -> ``running`` (its stack is being deployed and benchmarked) ->
``measured`` (its result is saved; its stack is being destroyed) -> ``done``, or to ``failed``
(with its classified cause, its stack destroyed too). Every change is written at once, by
renaming a complete file over the old one, so a kill at any moment leaves a readable file.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sglang_stacks.errors import SpecError

__all__ = ["STATE_FILE", "SweepState", "TrialRecord", "TrialStatus"]

STATE_FILE = "sweep.json"
TrialStatus = Literal["pending", "running", "measured", "done", "failed"]


class TrialRecord(BaseModel):
    """One trial: the candidate, where it ran, and what came of it."""

    model_config = ConfigDict(extra="forbid")

    stack: str
    labels: dict[str, str]
    status: TrialStatus = "pending"
    host: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    levels: list[dict[str, Any]] = Field(default_factory=list)
    """The benchmark's result per concurrency level (``BenchmarkResult`` as JSON)."""
    cause: str | None = None
    """A failed trial's class: ``out_of_memory``, ``nccl``, ``bad_flag``, ``claim``, ``preflight``,
    ``other``."""
    message: str | None = None
    """A failed trial's explanation."""
    stopped_early: str | None = None
    """Why a trial measured only its first repetitions (campaign ``early_stop``), or None."""


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")

    campaign: str
    elapsed_s: float = 0.0
    """Sweeping time of earlier, interrupted runs (the budget's max_hours counts it)."""
    trials: dict[str, TrialRecord] = Field(default_factory=dict)


class SweepState:
    """The sweep file and a lock: every method reads or writes under it, from any worker thread."""

    def __init__(self, path: Path, document: _Document) -> None:
        self.path = path
        self._document = document
        self._lock = threading.RLock()

    @classmethod
    def open(cls, folder: Path, campaign: str) -> SweepState:
        """The sweep file in ``folder``, or a new empty one."""
        path = folder / STATE_FILE
        if not path.exists():
            return cls(path, _Document(campaign=campaign))
        try:
            document = _Document.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, OSError) as error:
            raise SpecError(
                f"{path} is not a sweep file this version can read ({error}). Move it away to start the "
                "sweep afresh (its trial stacks stay in the backend)."
            ) from None
        return cls(path, document)

    @contextmanager
    def edit(self) -> Iterator[_Document]:
        """Change the document under the lock; it is saved when the block ends."""
        with self._lock:
            yield self._document
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(self._document.model_dump_json(indent=2), encoding="utf-8")
        os.replace(scratch, self.path)

    def trials(self) -> list[TrialRecord]:
        """Copies of every trial, in the order they were planned."""
        with self._lock:
            return [t.model_copy(deep=True) for t in self._document.trials.values()]

    @property
    def elapsed_s(self) -> float:
        with self._lock:
            return self._document.elapsed_s

    def update(self, stack: str, **changes: Any) -> None:
        """Set fields of one trial and save."""
        with self.edit() as document:
            record = document.trials[stack]
            document.trials[stack] = record.model_copy(update=changes)

    def claim_next(self, host: str, started_at: float) -> TrialRecord | None:
        """Mark the first pending trial running on ``host`` and return it; None when none is left."""
        with self.edit() as document:
            for stack, record in document.trials.items():
                if record.status == "pending":
                    document.trials[stack] = record.model_copy(
                        update={"status": "running", "host": host, "started_at": started_at}
                    )
                    return document.trials[stack].model_copy(deep=True)
        return None
