"""A search-efficiency space: a campaign's candidates planned by the project and worked out on the
emulator, the noise a trial's measurement carries, and the optimum's noise band under that noise.

Every candidate is planned by the project's own planner (``sglang_stacks.campaign.plan``: preflight
and the memory planner) and worked out once by the emulator's own code in virtual time
(``emulated_trials.emulate``). Working a space out takes minutes of CPU, so each candidate's outcome
is kept in a cache file per space, by candidate stack (whose name digests the stack's sections), in
a file named by a digest of the code an outcome depends on (the emulator, the world model, the flag
tables, the project's config code, ``emulated_trials`` and ``virtual_benchmark``); a candidate
missing from it is worked out and added.
"""

from __future__ import annotations

import functools
import hashlib
import math
import multiprocessing
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulated_trials import EmulatedTrial, emulate

from sglang_stacks.campaign.model import CampaignSpec, load_campaign
from sglang_stacks.campaign.plan import Plan, PlanRow, make_plan

__all__ = ["Candidate", "Noise", "Space", "load_space", "public_between_launch_cv"]

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-stacks" / "search-efficiency"
_SOURCES = ("sglang_emulator", "sglang_world", "sglang_flags", "sglang_stacks/config")
"""What a candidate's emulated outcome depends on besides its stack (whose name digests its sections)."""

PUBLIC_SGLANG_CV = {1: 0.0028, 2: 0.0026, 4: 0.0026, 8: 0.0011, 16: 0.0015, 32: 0.0254}
"""SGLang's run-to-run coefficient of variation of tok/s by concurrency on a real host (8 x RTX PRO
6000 class Blackwell SM120, fixed seed; public measurement in vllm-project/vllm#53436): fresh runs
of the same configuration, what a relaunched trial of one candidate varies by."""


def public_between_launch_cv(concurrency: int) -> float:
    """The public figure at ``concurrency``, or at the nearest measured level below it (above 32
    streams: 32's, the highest measured)."""
    level = max((c for c in PUBLIC_SGLANG_CV if c <= concurrency), default=1)
    return PUBLIC_SGLANG_CV[level]


@dataclass(frozen=True)
class Noise:
    """What a measured repetition's tok/s carries besides the candidate's true value: a term drawn
    once per launch (a fresh server's CUDA graphs, memory layout, clocks) and a term per repetition
    within the launch. A repetition measures ``value x (1 + between_cv x N) x (1 + within_cv x N')``."""

    name: str
    within_cv: float
    between_cv: float

    def band_fraction(self, repetitions: int) -> float:
        """How far below the optimum a candidate is still in its noise band: the difference of two
        trials' means (each one launch of ``repetitions`` repetitions) that a two-sided test at 5 %
        calls significant half the time, ``t(0.975, 2n - 2) x sqrt(2 x (between² + within² / n))``."""
        spread = math.sqrt(2 * (self.between_cv**2 + self.within_cv**2 / repetitions))
        return float(stats.t.ppf(0.975, 2 * repetitions - 2)) * spread

    def describe(self) -> str:
        between, within = 100 * self.between_cv, 100 * self.within_cv
        return f"{self.name}: {between:.2f} % between launches, {within:.3f} % within"


@dataclass(frozen=True)
class Candidate:
    """One candidate of a space: its plan verdict and what the emulator makes of it."""

    index: int
    stack: str
    labels: tuple[str, ...]
    kept: bool
    truth: EmulatedTrial
    value: float | None
    """Noise-free mean of the objective's level; None when the launch (or its benchmark) fails."""

    @property
    def gpu_s(self) -> float:
        """The host's GPU time for the whole trial: startup and every repetition."""
        return self.truth.host_s * self.truth.gpus


@dataclass(frozen=True)
class Space:
    """A campaign's candidates, worked out, with the optimum."""

    name: str
    plan: Plan
    candidates: tuple[Candidate, ...]
    within_cv: float
    """The within-trial CV measured on the emulator at this space's workload (``emulator_noise.py``)."""

    @property
    def campaign(self) -> CampaignSpec:
        return self.plan.campaign

    @property
    def concurrency(self) -> int:
        """The load level the objective reads."""
        concurrency = self.campaign.goals[0].level.concurrency
        assert concurrency is not None, "the benchmark's spaces read a closed-loop level"
        return concurrency

    @property
    def repetitions(self) -> int:
        workload = self.campaign.workload
        assert workload is not None, "the benchmark's spaces declare their workload"
        return workload.repetitions

    @functools.cached_property
    def by_stack(self) -> dict[str, Candidate]:
        return {c.stack: c for c in self.candidates}

    @functools.cached_property
    def by_labels(self) -> dict[tuple[str, ...], Candidate]:
        return {c.labels: c for c in self.candidates}

    @functools.cached_property
    def kept(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.kept)

    @functools.cached_property
    def optimum(self) -> float:
        return max(c.value for c in self.candidates if c.value is not None)

    @functools.cached_property
    def kept_gpu_s(self) -> float:
        return sum(c.gpu_s for c in self.kept)

    @property
    def mean_trial_gpu_s(self) -> float:
        """An average launch: the kept candidates' GPU time over their number."""
        return self.kept_gpu_s / len(self.kept)

    def default_noise(self) -> Noise:
        """Within a trial, the emulator's measured CV; between launches, SGLang's public figure at
        the objective's concurrency."""
        return Noise("default", self.within_cv, public_between_launch_cv(self.concurrency))

    def band(self, noise: Noise) -> frozenset[int]:
        """Indices of the candidates in the optimum's noise band under ``noise``."""
        low = self.optimum * (1 - noise.band_fraction(self.repetitions))
        return frozenset(c.index for c in self.candidates if c.value is not None and c.value >= low)

    def is_optimum(self, candidate: Candidate) -> bool:
        return candidate.value is not None and candidate.value >= self.optimum * (1 - 1e-9)


def _source_digest() -> str:
    """A digest of the code the worked-out outcomes depend on (files' names and content)."""
    digest = hashlib.sha256(sys.version.encode())
    files = [Path(__file__).with_name(name) for name in ("emulated_trials.py", "virtual_benchmark.py")]
    for folder in _SOURCES:
        files += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".json") and p.is_file())
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


_ROWS: list[PlanRow] = []
"""The rows the pool's workers work out (forked with them)."""


def _emulate_rows(indices: range) -> list[EmulatedTrial]:
    outcomes = []
    for index in indices:
        spec = _ROWS[index].spec
        assert spec is not None
        outcomes.append(emulate(spec))
    return outcomes


def _work_out(rows: Sequence[PlanRow], jobs: int, keep: Callable[[dict[str, EmulatedTrial]], None]) -> None:
    """Work each row out on ``jobs`` processes, in contiguous slices (neighbours share their
    benchmark, which each process works out once), handing each slice's outcomes to ``keep``."""
    _ROWS[:] = rows
    size = max(1, min(64, math.ceil(len(rows) / (jobs * 4))))
    slices = [range(start, min(start + size, len(rows))) for start in range(0, len(rows), size)]
    if jobs <= 1:
        done: Iterable[list[EmulatedTrial]] = map(_emulate_rows, slices)
    else:
        pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))
        done = pool.map(_emulate_rows, slices)
    for part, outcomes in zip(slices, done, strict=True):
        keep({rows[i].stack: outcome for i, outcome in zip(part, outcomes, strict=True)})
    if jobs > 1:
        pool.shutdown()


def _save(cache: Path, outcomes: dict[str, EmulatedTrial]) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial")
    partial.write_bytes(pickle.dumps(outcomes))
    partial.replace(cache)


def load_space(name: str, path: Path, within_cv: float, jobs: int = 1) -> tuple[Space, bool]:
    """Plan ``path`` with the project's planner and work every candidate out on the emulator (or
    read the outcomes from the cache); also whether the cache had them all."""
    campaign = load_campaign(path)
    plan = make_plan(path.stem, campaign, ROOT / "stacks")
    for row in plan.rows:
        if row.spec is None:
            raise SystemExit(f"{name}: candidate {row.stack} is not a valid stack: {row.reasons}")
    cache = CACHE / f"{name}-{_source_digest()}.pickle"
    outcomes: dict[str, EmulatedTrial] = pickle.loads(cache.read_bytes()) if cache.is_file() else {}
    missing = [row for row in plan.rows if row.stack not in outcomes]
    saved = time.monotonic()

    def keep(worked_out: dict[str, EmulatedTrial]) -> None:
        nonlocal saved
        outcomes.update(worked_out)
        if time.monotonic() - saved > 60:
            _save(cache, outcomes)  # an interrupted working-out goes on from here next time
            saved = time.monotonic()

    if missing:
        _work_out(missing, jobs, keep)
        _save(cache, outcomes)
    level = campaign.goals[0].level.concurrency
    candidates = []
    for index, row in enumerate(plan.rows):
        truth = outcomes[row.stack]
        value = None if truth.failure else truth.level(level or 1).tok_s_mean
        labels = tuple(row.candidate.labels.values())
        candidates.append(Candidate(index, row.stack, labels, row.verdict == "kept", truth, value))
    return Space(name, plan, tuple(candidates), within_cv), not missing
