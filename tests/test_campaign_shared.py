"""Drivers sharing one campaign study and its pool hosts, without Pulumi: several ``Sweep`` drivers on
one SQLite study (Optuna's heartbeats on), their trial stacks stood in for by a runner that keeps
each host's GPU claim as the host does (one stack at a time; another is refused). A host held by
another driver's trial is waited for, not a failure of the candidate that was to run there; a claim
refused by a stack outside the campaign sends the trial back to the queue; the trial of a driver
that is gone is taken over once its heartbeat is stale."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pytest

from sglang_stacks.campaign import hosts, study
from sglang_stacks.campaign.attributes import TrialRecord, records, write_attributes
from sglang_stacks.campaign.driver import Driver
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.campaign.plan import Plan, PlanRow, make_plan
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.study import database_of
from sglang_stacks.campaign.sweep import Sweep
from sglang_stacks.campaign.trial import TrialFailure
from sglang_stacks.errors import Cause
from sglang_stacks.results.stats import BenchmarkResult
from tests._pulumi import emulator_stack

SIZES = [16, 32, 64, 128, 256, 512]


def _plan(tmp_path: Path, extra: str = "") -> Plan:
    (tmp_path / "Pulumi.base.yaml").write_text(emulator_stack(port=30000, state_dir=tmp_path))
    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        f"base: base\naxes:\n  - {{key: server.cuda_graph_max_bs, values: {SIZES}}}\n"
        "workload: {repetitions: 2}\nsearch: {strategy: grid}\n"
        + extra
        + f"pool:\n  - {{name: gpu, host: {{kind: emulator, state_dir: {tmp_path}/host}}}}\n"
    )
    return make_plan("c", load_campaign(campaign), tmp_path)


def _level(tok_s: float = 88.0) -> BenchmarkResult:
    return BenchmarkResult.model_validate(
        {
            "concurrency": 1,
            "input_len": 32,
            "output_len": 48,
            "repetitions": 2,
            "tok_s_mean": tok_s,
            "tok_s_stdev": 0.1,
            "tok_s_ci95": [tok_s - 0.9, tok_s + 0.9],
            "tok_s_runs": [tok_s - 0.1, tok_s + 0.1],
            "requests": 2,
            "errors": 0,
        }
    )


class _Refused(Exception):
    """What a refused GPU claim fails an update with."""


@dataclass
class _Claims:
    """The pool hosts' GPU claims, as each host keeps its own: one stack at a time; while a stack
    holds a host, another's update is refused."""

    outside: dict[str, int] = field(default_factory=dict)
    """A stack outside the campaign holds the host at this state folder for so many more updates."""
    held: dict[str, str] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Runner:
    """Stands in for one driver's trial runner: a trial takes its host's claim, runs ``seconds``,
    and gives it back."""

    claims: _Claims
    seconds: float = 0.05

    def deploy(
        self, row: PlanRow, host: PoolHost, overrides: object = None, **_: object
    ) -> list[BenchmarkResult]:
        where = host.machines[0].state_dir
        with self.claims.lock:
            if self.claims.outside.get(where, 0) > 0:
                self.claims.outside[where] -= 1
                self.claims.refused.append(row.stack)
                raise _Refused(f"the GPUs of {host.name} belong to stack 'someone-else'")
            if where in self.claims.held:
                self.claims.refused.append(row.stack)
                raise _Refused(f"stack {self.claims.held[where]!r} is updating {host.name}")
            self.claims.held[where] = row.stack
        time.sleep(self.seconds)
        with self.claims.lock:
            del self.claims.held[where]
            self.claims.ran.append(row.stack)
        return [_level()]

    def destroy(self, stack: str, *, clear_pending: bool = False) -> None:
        del stack, clear_pending

    def settle(self, stack: str) -> list[str]:
        del stack
        return []

    def holds(self, stack: str) -> bool:
        del stack
        return False

    def failure(self, stack: str, error: Exception) -> TrialFailure:
        return TrialFailure(Cause.CLAIM if isinstance(error, _Refused) else Cause.CRASH, str(error))


def _driver(tmp_path: Path, name: str, runner: _Runner, plan: Plan) -> Sweep:
    """A driver with a project of its own (``name``) on the campaign's one study."""
    search = Search.open(plan, tmp_path / "reports")
    me = Driver.this(tmp_path / name)
    sweep = Sweep(plan, tmp_path / name, tmp_path / "reports", tmp_path / "h.sqlite", search, runner, me)  # type: ignore[arg-type]
    sweep.prepare()
    return sweep


def _drive(*sweeps: Sweep) -> None:
    workers = [threading.Thread(target=s.work, args=(s.plan.campaign.pool[0],)) for s in sweeps]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    for sweep in sweeps:
        sweep.close()


def _table(found: list[TrialRecord]) -> str:
    return "\n".join(f"{r.number} {r.state} {r.status} {r.stack} {r.cause} {r.message}" for r in found)


def test_two_drivers_on_one_host_take_turns_and_run_every_candidate_once(tmp_path: Path) -> None:
    # Before, the second driver's trial was refused the claim the first driver's trial held,
    # recorded as its candidate's failure (cause claim) and never run again.
    plan = _plan(tmp_path)
    claims = _Claims()
    first = _driver(tmp_path, "a", _Runner(claims, seconds=0.3), plan)
    second = _driver(tmp_path, "b", _Runner(claims, seconds=0.3), plan)

    _drive(first, second)

    found = records(first.study)
    assert claims.refused == [], _table(found)
    assert sorted(claims.ran) == sorted(row.stack for row in plan.kept()), _table(found)
    done = [r for r in found if r.status == "done"]
    assert sorted(r.stack for r in done) == sorted(row.stack for row in plan.kept()), _table(found)
    assert not [r for r in found if r.status == "failed"]
    # They met on the host: one waited for the other's trial, or both took it at once and gave way.
    met = [line for line in first.events + second.events if " is held by c-" in line or "same moment" in line]
    assert met, first.events + second.events
    # Two that took the host at the same moment both gave way: back to the queue, not failed.
    assert {(r.state, r.cause) for r in found if r.status == "requeued"} <= {("FAIL", "held")}


def test_a_host_held_by_a_stack_outside_the_campaign_sends_its_trial_back_to_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hosts, "REST_S", (0.2,))
    plan = _plan(tmp_path, "budget: {max_trials: 6}\n")
    claims = _Claims(outside={f"{tmp_path}/host": 2})  # someone's own update, twice
    sweep = _driver(tmp_path, "a", _Runner(claims), plan)

    _drive(sweep)

    found = records(sweep.study)
    requeued = [r for r in found if r.status == "requeued"]
    assert len(requeued) == 2 and {(r.state, r.cause) for r in requeued} == {("FAIL", "claim")}
    assert not any(r.launched for r in requeued)  # no GPU time, nothing of the budget
    assert sorted(r.stack for r in found if r.status == "done") == sorted(row.stack for row in plan.kept())
    assert any("is held by another stack" in line and "back to the queue" in line for line in sweep.events)
    assert len([r for r in found if r.launched]) == 6  # the budget of 6 launches ran the 6 candidates


def _stale_trial(plan: Plan, tmp_path: Path, driver: Driver, **outcome: Any) -> tuple[optuna.Study, str]:
    """A trial of the campaign's first candidate that ``driver`` runs on its host: it asked for
    it, beat once, and was never heard from again."""
    search = Search.open(plan, tmp_path / "reports")
    row = plan.kept()[0]
    search.enqueue(row.candidate.labels, {"stack": row.stack})
    trial, _ = search.ask()
    database = database_of(search.study)
    assert database is not None
    database.record_heartbeat(trial._trial_id)
    fields = {"stack": row.stack, "labels": row.candidate.labels, "driver": driver}
    fields |= {"status": "running", "host": "gpu", "host_gpus": 8, "started_at": time.time()} | outcome
    write_attributes(search.study, trial._trial_id, **fields)
    return search.study, row.stack


@pytest.mark.parametrize("saved", [False, True])
def test_the_trial_of_a_driver_on_another_machine_is_taken_over_once_its_heartbeat_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saved: bool
) -> None:
    monkeypatch.setattr(study, "GRACE_S", 1)
    monkeypatch.setattr(study, "HEARTBEAT_S", 0.2)
    plan = _plan(tmp_path)
    elsewhere = Driver(machine=f"not-{socket.gethostname()}", pid=4242, project="/srv/project")
    outcome = {"status": "measured", "levels": [_level(91.0)], "finished_at": time.time()} if saved else {}
    shared, stack = _stale_trial(plan, tmp_path, elsewhere, **outcome)
    claims = _Claims()
    sweep = _driver(tmp_path, "b", _Runner(claims), plan)
    time.sleep(1.5)  # the other machine's driver is silent longer than the grace period

    _drive(sweep)

    of_stack = [r for r in records(shared) if r.stack == stack]
    assert of_stack[0].state == "FAIL" and of_stack[0].driver == elsewhere
    assert [r.status for r in of_stack[1:]] == ["done"] and of_stack[1].replaces == of_stack[0].number
    # A result the gone driver had saved is kept, not measured again; else the candidate runs here.
    assert (stack in claims.ran) is not saved
    assert (of_stack[1].levels[0].tok_s_mean == 91.0) is saved
    assert any(line.startswith(f"{stack}: its driver (pid 4242 on not-") for line in sweep.events)
    assert sorted(r.stack for r in records(shared) if r.status == "done") == sorted(
        r.stack for r in plan.kept()
    )
