"""``sweep run``: the campaign's search, run on its pool. One worker per pool host asks the study for
the next candidate, has preflight and the memory planner judge it (a doomed one is told
infeasible: nothing is launched), runs it as a trial stack on its host through the Automation API
(deploy, benchmark, destroy) and tells the study the outcome, until the strategy's candidates, the
budget or the sampler's new suggestions run out. A progress table and one line per event show it.

Resuming. Ctrl-C lets Pulumi finish the step in flight, destroys each host's trial stack and tells
the study the trial was interrupted; its result is kept when its benchmark reached the results
history, else its candidate is queued to run again. A ``sweep run`` killed outright (SIGKILL of
its process group) leaves its trials running in the study under a driver that is gone: the next
``sweep run`` on this machine settles each (``TrialRunner.settle``: the dead update's Pulumi lock,
a server its create had launched, pending operations, then destroy), keeps a result it had saved
or that the history recorded, and queues its candidate again otherwise. Trials of a driver on
another machine are that machine's to settle (its stacks live in its backend).
"""

from __future__ import annotations

import contextlib
import fcntl
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import optuna
from optuna.trial import TrialState
from pulumi import automation as auto

from sglang_stacks.campaign import progress
from sglang_stacks.campaign.attributes import Driver, TrialAttributes, TrialRecord, records, write_attributes
from sglang_stacks.campaign.axes import trial_stack_name
from sglang_stacks.campaign.early_stop import IntervalPruner, merge_levels
from sglang_stacks.campaign.keys import check_pool_keys
from sglang_stacks.campaign.legacy import import_sweep_file
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.campaign.objective import samples
from sglang_stacks.campaign.plan import Plan, PlanRow, judge
from sglang_stacks.campaign.samplers import report_repetitions
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.study import heartbeat
from sglang_stacks.campaign.trial import TrialRunner
from sglang_stacks.errors import BenchmarkError, SpecError, StacksError
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import stacks_dir
from sglang_stacks.results import history

__all__ = ["MAX_REPEATS", "Sweep", "run_sweep"]

MAX_REPEATS = 50
"""Suggestions in a row of candidates already run after which the search has converged."""
ORPHAN_S = 120.0
"""A trial asked for but never given a driver (its driver died in between) is failed after this."""
_SIGNAL_GRACE_S = 1.0
_SETTLE_LOCK = ".settle.lock"
_WHERE_AND_WHEN = {
    "stack",
    "labels",
    "flags",
    "host",
    "host_gpus",
    "gpus",
    "driver",
    "started_at",
    "finished_at",
}
_ELAPSED = "elapsed_s"


@dataclass(frozen=True)
class _Picked:
    """A trial to run on a host, its plan row and its attributes so far."""

    trial: optuna.Trial
    row: PlanRow
    attributes: TrialAttributes


def _with_gpu_hours(attributes: TrialAttributes) -> TrialAttributes:
    """``attributes`` with its GPU time: its time on the host times the host's GPUs."""
    if attributes.started_at is None or attributes.finished_at is None:
        return attributes
    hours = (attributes.finished_at - attributes.started_at) / 3600 * (attributes.host_gpus or 1)
    return attributes.model_copy(update={"gpu_hours": hours})


@dataclass
class Sweep:
    """One ``sweep run`` of a campaign: its plan, project, report folder, search and trial runner."""

    plan: Plan
    project: Path
    folder: Path
    db_path: Path
    search: Search
    trials: TrialRunner
    driver: Driver = field(default_factory=Driver.this)
    stop: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)
    events: list[str] = field(default_factory=list)
    ended: str | None = None
    """Why the search stopped before its candidates ran out (budget, convergence)."""
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _repeats: int = 0
    _rows: dict[str, PlanRow] = field(default_factory=dict)

    @property
    def study(self) -> optuna.Study:
        return self.search.study

    def say(self, line: str) -> None:
        self.events.append(line)

    def records(self) -> list[TrialRecord]:
        return records(self.study)

    # -- before the workers start -------------------------------------------------------------

    def prepare(self) -> None:
        """Import the previous release's sweep file, settle the trials of a killed run, and
        queue a grid's candidates."""
        self._rows = {row.candidate.digest: row for row in self.plan.rows}
        with self._settling():
            for line in import_sweep_file(self.search, self.folder, self.trials.settle):
                self.say(line)
            self.settle_dead()
        if self.search.strategy == "grid":
            taken = {r.stack for r in self.records() if r.state != "FAIL"}
            for row in self.plan.kept():
                if row.stack not in taken:
                    self.search.enqueue(
                        row.candidate.labels, {"stack": row.stack, "labels": row.candidate.labels}
                    )

    @contextlib.contextmanager
    def _settling(self) -> Iterator[None]:
        """One driver of this machine at a time settles dead trials."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / _SETTLE_LOCK).open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def settle_dead(self) -> None:
        """Settle every running trial whose driver ran on this machine and is gone."""
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if "driver" not in trial.user_attrs:
                self._orphan(trial)
        for record in records(self.study, (TrialState.RUNNING,)):
            if record.driver is not None and record.driver.alive_here() is False:
                self._settle(record)

    def _orphan(self, trial: optuna.trial.FrozenTrial) -> None:
        """A trial asked for whose driver died before it wrote its driver: nothing was launched.
        It is failed, and a queued candidate queued again, once no live driver can be writing."""
        started = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
        if time.time() - started < ORPHAN_S:
            return
        self.study.tell(trial.number, state=TrialState.FAIL)
        labels = trial.user_attrs.get("labels")
        if "stack" in trial.user_attrs and isinstance(labels, dict):
            self.search.enqueue(labels, {"stack": trial.user_attrs["stack"], "labels": labels})

    def _settle(self, record: TrialRecord) -> None:
        driver = record.driver
        assert driver is not None
        self.say(f"{record.stack}: its sweep run (pid {driver.pid}) is gone; settling its stack")
        try:
            found = self.trials.settle(record.stack)
        except (StacksError, auto.CommandError) as error:
            raise StacksError(
                f"Trial {record.stack} of a killed sweep could not be settled ({error}). See "
                f"reports/{self.plan.name}/logs/{record.stack}.log, fix the cause, and run the sweep again."
            ) from None
        for line in found:
            self.say(f"{record.stack}: {line}")
        saved = self._saved_outcome(record)
        write_attributes(self.study, record.trial_id, status="interrupted")
        self.study.tell(record.number, state=TrialState.FAIL)
        if saved is not None:
            try:
                self.search.record(saved.model_copy(update={"replaces": record.number}))
                kept = "result it had measured" if saved.status == "measured" else f"failure ({saved.cause})"
                self.say(f"{record.stack}: keeps the {kept}; not run again")
                return
            except (KeyError, BenchmarkError) as error:
                self.say(f"{record.stack}: its saved outcome cannot be read ({error}); it runs again")
        self.search.enqueue(
            record.labels, {"stack": record.stack, "labels": record.labels, "replaces": record.number}
        )
        self.say(f"{record.stack}: queued to run again")

    def _saved_outcome(self, record: TrialRecord) -> TrialAttributes | None:
        """The outcome a killed trial had saved (measured, or failed), or the result the history
        recorded since it started; None when it has none (it runs again)."""
        fields = record.model_dump(
            include={
                "stack",
                "labels",
                "flags",
                "host",
                "host_gpus",
                "gpus",
                "driver",
                "started_at",
                "finished_at",
            }
        )
        if record.status in ("measured", "failed"):
            fields |= record.model_dump(include={"status", "levels", "cause", "message", "stopped_early"})
        else:
            levels = self._recorded_levels(record)
            if not levels:
                return None
            fields |= {"status": "measured", "levels": levels, "finished_at": time.time()}
        return _with_gpu_hours(TrialAttributes.model_validate(fields))

    def _recorded_levels(self, record: TrialAttributes) -> list[dict[str, Any]]:
        """The levels a trial's benchmark wrote to the history after the trial started, if any.
        None with early stop: the rows may hold the first part of a trial only (it runs again)."""
        if self.plan.campaign.early_stop is not None or record.started_at is None:
            return []
        since = record.started_at
        found = [r for r in history.rows(self.db_path, [record.stack]) if r.recorded_at.timestamp() >= since]
        return [row.result.model_dump(mode="json") for row in found]

    # -- choosing the next trial ----------------------------------------------------------------

    def over_budget(self, found: list[TrialRecord] | None = None) -> str | None:
        """Which budget limit is reached, or None."""
        budget = self.plan.campaign.budget
        elapsed = self.elapsed_before + time.monotonic() - self.started
        if budget.max_hours is not None and elapsed >= budget.max_hours * 3600:
            return f"budget.max_hours {budget.max_hours:g} reached"
        found = self.records() if found is None else found
        launched = [r for r in found if r.launched or (r.state == "RUNNING" and r.host is not None)]
        if budget.max_trials is not None and len(launched) >= budget.max_trials:
            return f"budget.max_trials {budget.max_trials} reached"
        now = time.time()
        gpu_hours = sum(
            r.gpu_hours
            if r.gpu_hours is not None
            else (now - (r.started_at or now)) / 3600 * (r.host_gpus or 0)
            for r in launched
        )
        if budget.max_gpu_hours is not None and gpu_hours >= budget.max_gpu_hours:
            return f"budget.max_gpu_hours {budget.max_gpu_hours:g} reached ({gpu_hours:.2f} GPU-hours)"
        return None

    @property
    def elapsed_before(self) -> float:
        return float(self.study.user_attrs.get(_ELAPSED, 0.0))

    def exhausted(self, found: list[TrialRecord]) -> bool:
        """No candidate is left: a grid's queue is empty, or every kept candidate of a listed
        space has its trial."""
        if any(r.state == "WAITING" for r in found):
            return False
        if self.search.strategy == "grid":
            return True
        if not self.plan.listed:
            return False
        taken = {r.stack for r in found if r.state != "FAIL" and r.status != "duplicate"}
        return all(row.stack in taken for row in self.plan.kept())

    def _verdict(self, stack: str, digest: str, candidate: Any) -> PlanRow:
        return self._rows.get(digest) or judge(self.plan.name, self.plan.campaign, candidate)

    def _earlier(self, stack: str, number: int, found: list[TrialRecord]) -> TrialRecord | None:
        """An earlier trial of the same candidate that ran, runs or was judged (lowest number)."""
        same = [
            r
            for r in found
            if r.stack == stack
            and r.number < number
            and r.state in ("RUNNING", "COMPLETE", "PRUNED")
            and r.status != "duplicate"
        ]
        return same[0] if same else None

    def next_trial(self, host: PoolHost) -> _Picked | None:
        """The next trial for ``host``, its attributes written; None when the search is over."""
        with self._lock:
            while not self.stop.is_set():
                found = self.records()
                self.ended = self.over_budget(found)
                if self.ended is not None or self.exhausted(found):
                    return None
                trial, candidate = self.search.ask()
                stack = trial_stack_name(self.plan.name, candidate)
                queued = dict(trial.user_attrs)  # an enqueued trial's (grid, or one run again)
                written: dict[str, Any] = {
                    "stack": stack,
                    "labels": candidate.labels,
                    "flags": self.search.space.flags(candidate),
                    "driver": self.driver,
                }
                write_attributes(self.study, trial._trial_id, **written)
                earlier = self._earlier(stack, trial.number, self.records())
                if earlier is not None:
                    self.search.tell_duplicate(trial, self.study.trials[earlier.number], written)
                    self._repeats += 1
                    if self._repeats >= MAX_REPEATS:
                        self.ended = (
                            f"converged: the last {MAX_REPEATS} suggestions were candidates already run"
                        )
                        return None
                    continue
                row = self._verdict(stack, candidate.digest, candidate)
                if row.verdict == "discarded":
                    self.search.tell_infeasible(trial, row, written)
                    why = row.reasons[0].split(":", 1)[0] if row.reasons else "preflight"
                    self.say(f"{stack} discarded by preflight ({why}); nothing launched")
                    continue
                self._repeats = 0
                running = {
                    "status": "running",
                    "host": host.name,
                    "host_gpus": host.host.gpu_count,
                    "gpus": row.spec.tp_size if row.spec else 1,
                    "started_at": time.time(),
                }
                write_attributes(self.study, trial._trial_id, **running)
                return _Picked(trial, row, TrialAttributes.model_validate(queued | written | running))
        return None

    # -- running a trial --------------------------------------------------------------------------

    def work(self, host: PoolHost) -> None:
        """One host's loop: run the next trial, until the search is over or the sweep stops."""
        while not self.stop.is_set():
            picked = self.next_trial(host)
            if picked is None:
                return
            self.run_trial(picked, host)

    def _told(self, picked: _Picked, **changes: Any) -> dict[str, Any]:
        """The trial's attributes to tell, with ``changes`` and its GPU time."""
        attributes = _with_gpu_hours(picked.attributes.model_copy(update=changes))
        return attributes.model_dump(
            include={
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
        )

    def _tell_measured(
        self, picked: _Picked, levels: list[dict[str, Any]], stopped: str | None, told: dict[str, Any]
    ) -> None:
        stack, host = picked.attributes.stack, picked.attributes.host
        try:
            evaluation = self.search.tell_measured(picked.trial, levels, told, stopped_early=stopped)
        except BenchmarkError as error:
            self.search.tell_failed(picked.trial, "benchmark", str(error), told)
            self.say(f"{stack} failed on {host} (benchmark): {error}")
            return
        missed = "".join(f"; misses {v.describe()}" for v in evaluation.violations)
        self.say(f"{stack} measured on {host}: {evaluation.values[0]:.1f}{missed}")
        if stopped:
            self.say(f"{stack} stopped early: {stopped}")

    def run_trial(self, picked: _Picked, host: PoolHost) -> None:
        """Deploy, benchmark and destroy one trial on ``host``, then tell the study."""
        row, trial, stack = picked.row, picked.trial, picked.row.stack
        self.say(f"{stack} started on {host.name}")
        with heartbeat(self.study, trial._trial_id):
            outcome: dict[str, Any]
            try:
                levels, stopped = self.measure(row, host, trial)
                outcome = {"status": "measured", "levels": levels, "stopped_early": stopped}
            except Exception as error:  # one trial's failure, whatever it is, must not end the sweep
                # Ctrl-C reaches every Pulumi process of the sweep, whichever step it was in, and
                # this process at the same moment: its handler may need a moment to say so.
                if self.stop.wait(_SIGNAL_GRACE_S):
                    self._interrupted(picked)
                    return
                failure = self.trials.failure(stack, error)
                outcome = {"status": "failed", "cause": failure.cause, "message": failure.message}
            outcome["finished_at"] = time.time()
            write_attributes(self.study, trial._trial_id, **outcome)  # kept should the sweep die now
            if not self._destroyed(stack):
                self.say(f"{stack}: destroy failed; the next sweep run destroys it (see its log)")
                return  # running, under this driver: the next sweep run settles it
        told = self._told(picked, finished_at=outcome["finished_at"])
        with self._lock:
            if outcome["status"] == "measured":
                self._tell_measured(picked, outcome["levels"], outcome["stopped_early"], told)
            else:
                self.search.tell_failed(trial, outcome["cause"], outcome["message"], told)
                self.say(f"{stack} failed on {host.name} ({outcome['cause']}); the sweep goes on")

    def measure(
        self, row: PlanRow, host: PoolHost, trial: optuna.Trial
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Deploy and benchmark a trial: its levels, and why it stopped early (None: it did not).
        With early stop, its first repetitions are reported to the study and its pruner decides."""
        early = self.plan.campaign.early_stop
        total = row.spec.benchmark.repetitions if row.spec else 0
        if early is None or early.after_repetitions >= total:
            return self.trials.deploy(row, host), None
        goal = self.plan.campaign.goals[0]
        gpus = row.spec.tp_size if row.spec else 1
        first = self.trials.deploy(row, host, {"benchmark.repetitions": early.after_repetitions})
        report_repetitions(trial, samples(goal, first, gpus))
        pruner = self.study.pruner
        if isinstance(pruner, IntervalPruner) and trial.should_prune():
            frozen = self.study.get_trials(deepcopy=False)[trial.number]
            return first, pruner.reason(self.study, frozen)
        rest = self.trials.deploy(
            row, host, {"benchmark.repetitions": total - early.after_repetitions}, benchmark_again=True
        )
        report_repetitions(trial, samples(goal, rest, gpus), first_step=early.after_repetitions)
        return merge_levels(first, rest), None

    def _destroyed(self, stack: str, interrupted: bool = False) -> bool:
        """Destroy a trial's stack; settle it first (``TrialRunner.settle``) when Ctrl-C cut its
        update short, which may have left a server it was launching running, known to no state."""
        for _ in range(2):
            try:
                if interrupted:
                    self.trials.settle(stack)
                else:
                    self.trials.destroy(stack)
                return True
            except SpecError:
                return True  # the backend has no such stack: nothing was deployed
            except (auto.CommandError, StacksError):
                if not self.stop.is_set():
                    return False
                interrupted = True
        return False

    def _interrupted(self, picked: _Picked) -> None:
        """Ctrl-C cut the trial short: destroy its stack, keep a result that reached the history,
        else queue its candidate again."""
        stack = picked.attributes.stack
        levels = self._recorded_levels(picked.attributes)
        if not self._destroyed(stack, interrupted=True):
            return  # running, under this driver: the next sweep run settles it
        with self._lock:
            if levels:
                self._tell_measured(picked, levels, None, self._told(picked, finished_at=time.time()))
                return
            write_attributes(self.study, picked.trial._trial_id, status="interrupted")
            self.study.tell(picked.trial, state=TrialState.FAIL)
            self.search.enqueue(
                picked.attributes.labels,
                {"stack": stack, "labels": picked.attributes.labels, "replaces": picked.trial.number},
            )


def _stop_on_ctrl_c(stop: threading.Event) -> Any:
    """Set ``stop`` the moment Ctrl-C arrives, before the main thread unwinds, so a worker whose
    Pulumi process the same Ctrl-C ended knows why; the previous handler, or None when none was
    set (off the main thread, or with Ctrl-C ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        return None  # started with Ctrl-C ignored (a background job): it stays so

    def interrupted(signum: int, frame: object) -> None:
        stop.set()
        raise KeyboardInterrupt

    return signal.signal(signal.SIGINT, interrupted)


def run_sweep(plan: Plan, *, project: Path, reports: Path, db_path: Path, out: TextIO) -> int:
    """Run the plan's search; 0 when it is over (every trial run, or a budget reached), 130 when
    interrupted."""
    folder = reports / plan.name
    check_pool_keys(plan.campaign, stacks_dir(project))  # before anything is launched
    budget = plan.campaign.budget
    if (
        not plan.listed
        and budget.max_trials is None
        and budget.max_gpu_hours is None
        and budget.max_hours is None
    ):
        raise SpecError(
            f"Campaign {plan.name}'s axes make too many candidates to run them all; set budget.max_trials "
            "(or max_gpu_hours, or max_hours) in the campaign file."
        )
    search = Search.open(plan, folder)
    trials = TrialRunner(project, folder / "logs", plan.name, plan.campaign.base)
    sweep = Sweep(plan, project, folder, db_path, search, trials)
    sweep.prepare()
    workers = [
        threading.Thread(target=sweep.work, args=(h,), name=h.name, daemon=True) for h in plan.campaign.pool
    ]
    interrupted = False
    previous = _stop_on_ctrl_c(sweep.stop)
    try:
        with progress.display(sweep, out) as refresh:
            for worker in workers:
                worker.start()
            while any(w.is_alive() for w in workers):
                refresh()
                time.sleep(0.5)
            refresh()
    except KeyboardInterrupt:
        interrupted = True
        sweep.stop.set()
        print(
            "sweep: interrupted; finishing the steps in flight and destroying their stacks",
            file=out,
            flush=True,
        )
        for worker in workers:
            worker.join()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        search.study.set_user_attr(_ELAPSED, sweep.elapsed_before + time.monotonic() - sweep.started)
    print(progress.summary(sweep), file=out, flush=True)
    return ExitCode.INTERRUPTED if interrupted else ExitCode.OK
