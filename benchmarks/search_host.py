"""The emulated host a search-efficiency run launches its trials on: each launch pays its startup,
each benchmark its warmup and repetitions, in GPU time; each measurement carries the noise of a
fresh launch and of its repetitions; every trial is logged for the account.

The noise of a candidate's k-th launch in a seed is drawn from its own generator (seed, noise level,
candidate, k), so every strategy that launches a candidate in the same seed measures the same
numbers: the strategies differ in what they launch, never in their luck with it.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field

from search_space import Candidate, Noise, Space

__all__ = ["Event", "Host", "StopRule", "Trial"]


@dataclass
class Event:
    """One launch, as the account records it once its server stopped."""

    launch: int
    gpu_s: float
    """The run's GPU seconds once this trial ended."""
    candidate: int
    full: bool
    """Measured in every repetition (not failed, not stopped early)."""
    runs: tuple[float, ...]
    """Measured tok/s per repetition."""


@dataclass
class Host:
    """Launches one strategy's trials in one seed: noisy measurements, GPU time, the event log."""

    space: Space
    noise: Noise
    seed: int
    gpu_s: float = 0.0
    launches: int = 0
    events: list[Event] = field(default_factory=list)
    _launched: dict[int, int] = field(default_factory=dict)

    @property
    def exhausted(self) -> bool:
        """The run has spent the kept candidates' whole GPU time."""
        return self.gpu_s >= self.space.kept_gpu_s

    def launch(self, candidate: Candidate) -> Trial:
        """Start ``candidate``'s server; its startup (or the failure) is paid now."""
        self.launches += 1
        self.gpu_s += candidate.truth.startup_s * candidate.truth.gpus
        count = self._launched.get(candidate.index, 0)
        self._launched[candidate.index] = count + 1
        rng = random.Random(f"{self.space.name}/{self.noise.name}/{self.seed}/{candidate.index}/{count}")
        return Trial(self, candidate, rng, 1 + self.noise.between_cv * rng.gauss(0.0, 1.0))


@dataclass
class Trial:
    """A launched trial; repetitions are measured (and paid for) as they are asked for."""

    host: Host
    candidate: Candidate
    rng: random.Random
    launch_factor: float
    """This launch's offset from the candidate's true value (the between-launch term)."""
    runs: list[float] = field(default_factory=list)

    @property
    def failure(self) -> str | None:
        return self.candidate.truth.failure

    def measure(self, repetitions: int) -> list[float]:
        """One benchmark of the next ``repetitions`` repetitions (its warmup included)."""
        level = self.candidate.truth.level(self.host.space.concurrency)
        start = len(self.runs)
        seconds = level.warmup_s + sum(level.repetition_s[start : start + repetitions])
        self.host.gpu_s += seconds * self.candidate.truth.gpus
        within = self.host.noise.within_cv
        new = [
            value * self.launch_factor * (1 + within * self.rng.gauss(0.0, 1.0))
            for value in level.tok_s_runs[start : start + repetitions]
        ]
        self.runs += new
        return new

    def end(self) -> tuple[float, ...]:
        """The trial's server is stopped: log it; its runs."""
        full = self.failure is None and len(self.runs) == self.host.space.repetitions
        runs = tuple(self.runs)
        self.host.events.append(Event(self.host.launches, self.host.gpu_s, self.candidate.index, full, runs))
        return runs

    def run_all(self) -> float | None:
        """Launch already paid: measure every repetition (unless the launch failed) and end; the
        measured mean, None for a failed launch."""
        if self.failure is None:
            self.measure(self.host.space.repetitions)
        runs = self.end()
        return statistics.fmean(runs) if runs else None


@dataclass
class StopRule:
    """When a run may end: the band found and the budget spent, or the host exhausted."""

    band: frozenset[int]
    budget_s: float

    def done(self, host: Host) -> bool:
        if host.exhausted:
            return True
        found = any(e.full and e.candidate in self.band for e in host.events)
        return found and host.gpu_s >= self.budget_s
