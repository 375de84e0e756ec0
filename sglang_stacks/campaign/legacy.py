"""The previous release's sweep state (``reports/<campaign>/sweep.json``), imported once into the
campaign's study so a campaign started before keeps its finished trials.

The file held one record per kept candidate: ``pending``, ``running`` (its stack deployed and
benchmarked), ``measured`` (result saved, stack being destroyed), ``done`` or ``failed``. Finished
trials become finished trials of the study, as the search would have told them; a trial the old
sweep left running or measured has its stack settled first (only ``sweep run`` can do that) and
keeps a result it had saved; pending ones are left to the search. The file is then renamed
``sweep.imported.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from sglang_stacks.campaign.attributes import TrialAttributes, read_study_attributes, write_study_attributes
from sglang_stacks.campaign.search import Search
from sglang_stacks.errors import BenchmarkError, SpecError
from sglang_stacks.results.stats import BenchmarkResult
from sglang_stacks.shape import Shape

__all__ = ["IMPORTED_FILE", "STATE_FILE", "import_sweep_file"]

STATE_FILE = "sweep.json"
IMPORTED_FILE = "sweep.imported.json"


class _Trial(Shape):
    """One trial of the sweep file, as the previous release wrote it."""

    model_config = ConfigDict(extra="forbid")

    stack: str
    labels: dict[str, str]
    status: Literal["pending", "running", "measured", "done", "failed"] = "pending"
    host: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    levels: list[BenchmarkResult] = Field(default_factory=list)
    cause: str | None = None
    message: str | None = None
    stopped_early: str | None = None


class _Document(Shape):
    model_config = ConfigDict(extra="forbid")

    campaign: str
    elapsed_s: float = 0.0
    trials: dict[str, _Trial] = Field(default_factory=dict)


def _read(path: Path) -> _Document:
    try:
        return _Document.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, OSError) as error:
        raise SpecError(
            f"{path} is not a sweep file this version can read ({error}). Move it away to start the "
            "campaign afresh (its trial stacks stay in the backend)."
        ) from None


def import_sweep_file(search: Search, folder: Path, settle: Callable[[str], object] | None) -> list[str]:
    """Import ``folder``'s sweep file into ``search``'s study, once; what was done, in sentences.
    ``settle`` brings a trial stack the old sweep left deployed back to nothing; without it
    (``sweep report``), a file with such trials is left for ``sweep run`` (SpecError)."""
    path = folder / STATE_FILE
    if not path.exists() or read_study_attributes(search.study).imported_sweep_file is not None:
        return []
    document = _read(path)
    unsettled = [t.stack for t in document.trials.values() if t.status in ("running", "measured")]
    if unsettled and settle is None:
        raise SpecError(
            f"{path} is the previous release's state of this campaign, with trials it left running "
            f"({', '.join(unsettled)}). Run `sglang-stacks sweep run {folder.name}` once: it settles them "
            "and imports every finished trial into the campaign's study (nothing done runs again)."
        )
    said: list[str] = []
    imported = 0
    pool = {host.name: host.gpu_count for host in search.campaign.pool}
    for trial in document.trials.values():
        if trial.status == "pending":
            continue
        if trial.status in ("running", "measured"):
            assert settle is not None
            settle(trial.stack)
            said.append(
                f"{trial.stack}: left running by the previous release's sweep; its stack is destroyed"
            )
            if not trial.levels:
                continue  # the search runs it again if it suggests it
        attributes = TrialAttributes(
            stack=trial.stack,
            labels=trial.labels,
            status="failed" if trial.status == "failed" else "measured",
            host=trial.host,
            host_gpus=pool.get(trial.host or ""),
            gpus=search.space.gpus(trial.labels),
            started_at=trial.started_at,
            finished_at=trial.finished_at,
            levels=trial.levels,
            cause=trial.cause,
            message=trial.message,
            stopped_early=trial.stopped_early,
        )
        try:
            search.record(attributes.with_gpu_hours())
        except KeyError:
            said.append(
                f"{trial.stack}: not imported: its axis values {trial.labels} are no points of the axes now"
            )
            continue
        except BenchmarkError as error:
            said.append(f"{trial.stack}: not imported: {error}")
            continue
        imported += 1
    elapsed = read_study_attributes(search.study).elapsed_s + document.elapsed_s
    write_study_attributes(search.study, imported_sweep_file=imported, elapsed_s=elapsed)
    path.rename(folder / IMPORTED_FILE)
    said.append(
        f"imported {imported} finished trial(s) of {STATE_FILE} (the previous release's state) into the "
        f"campaign's study; the file is now {IMPORTED_FILE}"
    )
    return said
