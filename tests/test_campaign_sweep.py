"""The sweep's trial loop on an in-memory study, its trial stacks stood in for: a suggestion does not
read again what the study says of the trials already finished or queued (a long search's CPU grew
with the square of its trials), and a trial whose update Ctrl-C ended is queued to run again, not
recorded failed, however late Python runs the Ctrl-C handler in the main thread."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import optuna
import pytest
from pulumi import automation as auto

from sglang_stacks.campaign import attributes, progress
from sglang_stacks.campaign.attributes import TrialRecord, records
from sglang_stacks.campaign.choose import Picked
from sglang_stacks.campaign.interrupt import CtrlC
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.plan import Plan, PlanRow, format_plan, make_plan
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.sweep import Sweep
from sglang_stacks.campaign.trial import TrialFailure
from sglang_stacks.errors import Cause, SpecError
from sglang_stacks.results.stats import BenchmarkResult
from tests._pulumi import emulator_stack

SIZES = list(range(8, 488, 8))  # 60 candidates


def _plan(tmp_path: Path, extra: str = "") -> Plan:
    (tmp_path / "Pulumi.base.yaml").write_text(emulator_stack(port=30000, state_dir=tmp_path))
    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        f"base: base\naxes:\n  - {{key: server.cuda_graph_max_bs, values: {SIZES}}}\n"
        "workload: {repetitions: 2}\nsearch: {strategy: grid}\n"
        + extra
        + "pool:\n  - {name: a, host: {kind: emulator, state_dir: /tmp/a}}\n"
    )
    return make_plan("c", load_campaign(campaign), tmp_path)


def _level() -> BenchmarkResult:
    return BenchmarkResult.model_validate(
        {
            "concurrency": 1,
            "input_len": 32,
            "output_len": 48,
            "repetitions": 2,
            "tok_s_mean": 88.0,
            "tok_s_stdev": 0.1,
            "tok_s_ci95": [87.1, 88.9],
            "tok_s_runs": [87.9, 88.1],
            "requests": 2,
            "errors": 0,
            "ttft_ms": {"p50": 40.0, "p90": 41.0, "p99": 42.0},
        }
    )


class _Measured:
    """Stands in for the trial runner: every trial measures one level; its stack holds nothing."""

    def deploy(
        self, row: PlanRow, host: object, overrides: object = None, **_: object
    ) -> list[BenchmarkResult]:
        return [_level()]

    def destroy(self, stack: str, *, clear_pending: bool = False) -> None:
        del stack, clear_pending

    def settle(self, stack: str) -> list[str]:
        return []

    def failure(self, stack: str, error: Exception) -> TrialFailure:
        return TrialFailure(Cause.CRASH, str(error))


def _sweep(tmp_path: Path, trials: object, extra: str = "", earlier_s: float = 0.0) -> Sweep:
    """A sweep prepared on a new study; ``earlier_s``: the time its earlier runs swept."""
    plan = _plan(tmp_path, extra)
    search = Search.in_memory(plan.campaign, plan.base, len(plan.kept()), 2)
    attributes.write_study_attributes(search.study, elapsed_s=earlier_s)
    sweep = Sweep(plan, tmp_path, tmp_path / "reports", tmp_path / "history.sqlite", search, trials)  # type: ignore[arg-type]
    sweep.prepare()
    return sweep


def test_a_suggestion_reads_no_finished_or_queued_trial_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = _sweep(tmp_path, _Measured())
    host = sweep.plan.campaign.pool[0]
    for _ in range(20):
        picked = sweep.next_trial(host)
        assert picked is not None
        sweep.run_trial(picked, host)
    before = {r.number: r.state for r in sweep.records()}  # as the progress display reads them
    assert list(before.values()).count("COMPLETE") == 20 and list(before.values()).count("WAITING") == 40
    read: list[int] = []
    record = attributes._record

    def counted(study: Any, trial: Any) -> TrialRecord | None:
        read.append(trial.number)
        return record(study, trial)

    monkeypatch.setattr(attributes, "_record", counted)

    picked = sweep.next_trial(host)

    assert picked is not None and before[picked.trial.number] == "WAITING"
    assert set(read) == {picked.trial.number}  # the queued trial it took, now running; no other


def _run_cut_by_ctrl_c(sweep: Sweep) -> tuple[Picked, list[TrialRecord]]:
    """Run the next trial in a worker while the main thread waits under the sweep's Ctrl-C handling,
    which the trial's runner makes come: the trial, and its stack's records in the study after."""
    host = sweep.plan.campaign.pool[0]
    picked = sweep.next_trial(host)
    assert picked is not None
    worker = threading.Thread(target=sweep.run_trial, args=(picked, host))
    with sweep.ctrl_c:
        with pytest.raises(KeyboardInterrupt):
            worker.start()
            sweep.stop.wait(60)
        worker.join()
    return picked, [r for r in records(sweep.study) if r.stack == picked.attributes.stack]


class _CtrlCEndsTheUpdate(_Measured):
    """The update's Pulumi process ends on Ctrl-C, which this worker thread takes; ``decided`` is
    set once the worker has judged the trial (settled it as interrupted, or classed its failure)."""

    def __init__(self) -> None:
        self.decided = threading.Event()

    def deploy(
        self, row: PlanRow, host: object, overrides: object = None, **_: object
    ) -> list[BenchmarkResult]:
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        raise auto.CommandError(auto.CommandResult(stdout="", stderr="update canceled", code=255))

    def settle(self, stack: str) -> list[str]:
        self.decided.set()
        return []

    def failure(self, stack: str, error: Exception) -> TrialFailure:
        self.decided.set()
        return super().failure(stack, error)


def test_a_trial_whose_update_ctrl_c_ended_runs_again_though_the_handler_has_not_run_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trials = _CtrlCEndsTheUpdate()
    sweep = _sweep(tmp_path, trials)
    handler = signal.getsignal(signal.SIGINT)
    handle = CtrlC._handle

    def late(ctrl_c: CtrlC, signum: int, frame: FrameType | None) -> None:
        trials.decided.wait(60)  # the main thread is busy: Python runs the handler after the worker judged
        handle(ctrl_c, signum, frame)

    monkeypatch.setattr(CtrlC, "_handle", late)
    picked, of_stack = _run_cut_by_ctrl_c(sweep)

    assert [(r.state, r.status) for r in of_stack] == [("FAIL", "interrupted"), ("WAITING", "queued")]
    assert of_stack[1].replaces == picked.trial.number
    assert not any("failed" in line for line in sweep.events), sweep.events
    assert signal.getsignal(signal.SIGINT) is handler  # given back


class _CtrlCTakenByTheMainThread(_CtrlCEndsTheUpdate):
    """The same Ctrl-C ends the update's Pulumi process (created stacks die quickest) and reaches
    this process, where the kernel gives it to the main thread, which is slow to run on a busy
    machine: the worker sees its Pulumi process end before the signal is written down."""

    def __init__(self, main: int, late_s: float) -> None:
        super().__init__()
        self.main, self.late_s = main, late_s

    def deploy(
        self, row: PlanRow, host: object, overrides: object = None, **_: object
    ) -> list[BenchmarkResult]:
        threading.Timer(self.late_s, signal.pthread_kill, (self.main, signal.SIGINT)).start()
        raise auto.CommandError(auto.CommandResult(stdout="", stderr="", code=-2))


def test_a_trial_whose_pulumi_ctrl_c_ended_before_the_signal_was_noted_runs_again(tmp_path: Path) -> None:
    """A full test run once recorded such a trial failed ("Pulumi could not create stack ...") and the
    resumed sweep never ran its candidate: the worker judged before the main thread noted Ctrl-C."""
    trials = _CtrlCTakenByTheMainThread(threading.main_thread().ident or 0, late_s=0.3)
    sweep = _sweep(tmp_path, trials)
    _, of_stack = _run_cut_by_ctrl_c(sweep)

    assert [(r.state, r.status) for r in of_stack] == [("FAIL", "interrupted"), ("WAITING", "queued")]
    assert not any("failed" in line for line in sweep.events), sweep.events


def test_the_hours_budget_counts_the_earlier_runs_time_once(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path, _Measured(), "budget: {max_hours: 1}\n", earlier_s=3500.0)  # 58 min before
    plan, search = sweep.plan, sweep.search

    assert sweep.next_trial(plan.campaign.pool[0]) is not None
    sweep.started -= 100  # this run has swept 100 s since
    assert sweep.next_trial(plan.campaign.pool[0]) is None
    assert sweep.ended == "budget.max_hours 1 reached"
    sweep.keep_elapsed()
    sweep.keep_elapsed()  # kept again: this run's time counts once, however often it is kept
    assert 3600 <= attributes.read_study_attributes(search.study).elapsed_s < 3610


def test_a_suggestion_written_in_part_is_not_read_yet_and_one_this_version_cannot_read_is_refused() -> None:
    # A driver killed between writing a suggestion's stack and its labels leaves the stack alone.
    study = optuna.create_study()
    partial = study.ask()
    study._storage.set_trial_user_attr(partial._trial_id, "stack", "c-partial")
    frozen = study.get_trials(deepcopy=False)[0]

    assert records(study) == [] and attributes.suggested(study, frozen) is None

    study._storage.set_trial_user_attr(partial._trial_id, "labels", "not a mapping")
    with pytest.raises(SpecError, match=r"Trial 0 of study .* has attributes this version cannot read"):
        records(study)


def test_the_summary_counts_the_candidates_the_plan_discarded_as_the_plan_did(tmp_path: Path) -> None:
    # A grid never suggests what the plan discarded: the summary said "0 suggestions discarded by
    # preflight" right under the plan's "2 discarded by preflight".
    (tmp_path / "Pulumi.base.yaml").write_text(emulator_stack(port=30000, state_dir=tmp_path))
    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        "base: base\naxes:\n  - {key: server.cuda_graph_max_bs, values: [128, 256]}\n"
        "  - {key: server.tp_size, values: [8, 16]}\nworkload: {repetitions: 2}\nsearch: {strategy: grid}\n"
        "pool:\n  - {name: a, host: {kind: emulator, state_dir: /tmp/a}}\n"
    )
    plan = make_plan("c", load_campaign(campaign), tmp_path)
    search = Search.in_memory(plan.campaign, plan.base, len(plan.kept()), 2)
    sweep = Sweep(plan, tmp_path, tmp_path / "reports", tmp_path / "history.sqlite", search, _Measured())  # type: ignore[arg-type]
    sweep.prepare()

    sweep.work(plan.campaign.pool[0])

    said = progress.summary(sweep)
    assert "4 candidates: 2 kept, 2 discarded by preflight" in format_plan(plan)
    assert (
        "c: 2 done, 0 failed, 0 running; 2 of the 4 candidates discarded by preflight before any launch"
        in said
    )
