"""A trial's failure as a user reads it, in ``sweep run``'s lines, the report and ``sweep promote``:
named by its class (Pulumi's own error, Pulumi ended with none, ``sweep run``'s own step) with a
fix, never "(other)". A failure an earlier version saved as "other" still loads, and is said as
what it was. The trial runner's classification is the real one, reading the trial's log as Pulumi
wrote it; only the update itself is stood in for."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from pulumi import automation as auto

from sglang_stacks.campaign import hosts
from sglang_stacks.campaign.plan import Plan, PlanRow
from sglang_stacks.campaign.promote import promote_winner
from sglang_stacks.campaign.report import write_report
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.sweep import Sweep
from sglang_stacks.campaign.trial import TrialFailure, TrialRunner
from sglang_stacks.errors import HostError, SpecError
from sglang_stacks.results.stats import BenchmarkResult
from tests.test_campaign_sweep import _plan

LOCKED = (
    "error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end "
    "or delete the lock file with `pulumi cancel`."
)


def _pulumis_own_error(runner: TrialRunner, stack: str) -> None:
    """Pulumi refuses the update itself: a lock of another process."""
    _log(runner, stack, f"Updating ({stack}):\n{LOCKED}\n")
    raise auto.CommandError(auto.CommandResult(stdout="", stderr=LOCKED, code=255))


def _killed(runner: TrialRunner, stack: str) -> None:
    """Pulumi is killed mid-update (the machine's OOM killer): no error line at all."""
    _log(runner, stack, f"Updating ({stack}):\n +  sglang:index:Server {stack}-server creating (4s)\n")
    raise auto.CommandError(auto.CommandResult(stdout="", stderr="", code=137))


def _disk_full(runner: TrialRunner, stack: str) -> None:
    """``sweep run``'s own step fails before the update: its stack file cannot be written."""
    raise OSError(28, "No space left on device")


def _bad_stack_file(runner: TrialRunner, stack: str) -> None:
    """An error of this tool before the update (the trial's stack file refused) keeps its class."""
    raise SpecError("server.port is 70000, above 65535. Set server.port to a free port below 65536.")


def _log(runner: TrialRunner, stack: str, text: str) -> None:
    (handle, write), _ = runner._stream(stack, "up")
    with handle:
        for line in text.splitlines():
            write(line)


class _Failing:
    """Stands in for the trial runner's update, each failing its own way; the failure is classified
    by the real runner from the log written as it writes one."""

    def __init__(self, real: TrialRunner, updates: list[Callable[[TrialRunner, str], None]]) -> None:
        self.real = real
        self.updates = updates

    def deploy(
        self, row: PlanRow, host: object, overrides: object = None, **_: object
    ) -> list[BenchmarkResult]:
        self.updates.pop(0)(self.real, row.stack)
        return []

    def destroy(self, stack: str, *, clear_pending: bool = False) -> None:
        del stack, clear_pending

    def settle(self, stack: str) -> list[str]:
        return []

    def holds(self, stack: str) -> bool:
        return False

    def failure(self, stack: str, error: Exception) -> TrialFailure:
        return self.real.failure(stack, error)


def _swept(tmp_path: Path, updates: list[Callable[[TrialRunner, str], None]]) -> tuple[Plan, Sweep]:
    plan = _plan(tmp_path)
    reports = tmp_path / "reports"
    search = Search.open(plan, reports / plan.name)
    real = TrialRunner(tmp_path, reports / plan.name / "logs", plan.name, plan.campaign.base)
    sweep = Sweep(plan, tmp_path, reports, tmp_path / "history.sqlite", search, _Failing(real, updates))  # type: ignore[arg-type]
    sweep.prepare()
    host = plan.campaign.pool[0]
    for _ in updates[:]:
        picked = sweep.next_trial(host)
        assert picked is not None
        sweep.run_trial(picked, host)
    return plan, sweep


def _said(sweep: Sweep, number: int) -> str:
    stack = sweep.records()[number].stack
    return next(line for line in sweep.events if line.startswith(f"{stack} failed"))


def test_each_failure_of_a_trial_is_named_with_a_fix_in_the_sweeps_lines_and_its_report(
    tmp_path: Path,
) -> None:
    plan, sweep = _swept(tmp_path, [_pulumis_own_error, _killed, _disk_full, _bad_stack_file])
    logs = f"{tmp_path}/reports/c/logs"
    first, second, third, fourth = (sweep.records()[n].stack for n in range(4))

    assert _said(sweep, 0) == (
        f"{first} failed on a (pulumi); the sweep goes on. Pulumi failed the update with an error of its "
        f'own; fix what it names (its whole output is in {logs}/{first}.log): "{LOCKED}"'
    )
    assert _said(sweep, 1) == (
        f"{second} failed on a (pulumi); the sweep goes on. pulumi up ended with exit code 137 and named "
        f"no error; fix what it names (its whole output is in {logs}/{second}.log). Its last lines: "
        f'"Updating ({second}): / +  sglang:index:Server {second}-server '
        'creating (4s)"'
    )
    assert _said(sweep, 2) == (
        f"{third} failed on a (driver); the sweep goes on. sweep run failed around the update of {third}, "
        "not in it: OSError: [Errno 28] No space left on device. Fix what it names; if it names nothing "
        "of this machine (a disk, a permission), it is a fault of sglang-stacks: report it with the "
        f"trial's log, {logs}/{third}.log."
    )
    assert _said(sweep, 3) == (
        f"{fourth} failed on a (spec); the sweep goes on. server.port is 70000, above 65535. Set "
        "server.port to a free port below 65536."
    )
    report = write_report(plan, tmp_path / "reports").read_text()
    failed = report.split("## Failed trials", 1)[1]
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[2].strip()
        for line in failed.splitlines()
        if "| `" in line
    }
    assert rows == {first: "pulumi", second: "pulumi", third: "driver", fourth: "spec"}
    assert "Pulumi failed the update with an error of its own; fix what it names" in failed
    assert "(other)" not in report and "| other |" not in report
    assert not any("(other)" in line for line in sweep.events)


def test_a_failure_an_earlier_version_saved_as_other_still_loads_and_says_what_it_was(tmp_path: Path) -> None:
    plan, _ = _swept(tmp_path, [])
    # As an earlier version told a trial whose update Pulumi failed on its own.
    search = Search.open(plan, tmp_path / "reports" / plan.name)
    search.enqueue({"server.cuda_graph_max_bs": "8"}, {"stack": "c-old", "labels": {}})
    trial, candidate = search.ask()
    search.tell_failed(trial, "other", "error: update failed", {"stack": "c-old", "labels": candidate.labels})

    report = write_report(plan, tmp_path / "reports").read_text()
    with pytest.raises(SpecError) as refused:
        promote_winner(
            plan,
            reports=tmp_path / "reports",
            stacks_dir=tmp_path,
            target="t",
            yes=True,
            out=io.StringIO(),
            trial="c-old",
        )

    said = "unclassified (recorded by an earlier version; its message says why)"
    assert f"| `c-old` | {said} | error: update failed |" in report
    assert f"Trial c-old of campaign c failed on its host ({said}): it has no measured configuration" in str(
        refused.value
    )
    assert "(other)" not in report + str(refused.value)


def _unreachable(runner: TrialRunner, stack: str) -> None:
    """The pool host's name does not resolve: the host's failure, whatever the candidate."""
    raise HostError(
        "Could not reach gpu-a over SSH: Name or service not known. Check host.address in the pool.",
        summary="The host gpu-a could not be reached (host).",
    )


def test_a_trial_its_host_fails_goes_back_to_the_queue_and_the_host_takes_no_more_after_three(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was charged to the candidate: "failed (host)", infeasible to the sampler, never run again.
    monkeypatch.setattr(hosts, "REST_S", (0.0,))  # no rest between the tries, in this test only
    plan = _plan(tmp_path)
    reports = tmp_path / "reports"
    search = Search.open(plan, reports / plan.name)
    real = TrialRunner(tmp_path, reports / plan.name / "logs", plan.name, plan.campaign.base)
    failing = _Failing(real, [_unreachable] * hosts.HOST_FAILURES)
    sweep = Sweep(plan, tmp_path, reports, tmp_path / "history.sqlite", search, failing)  # type: ignore[arg-type]
    sweep.prepare()
    host = plan.campaign.pool[0]

    sweep.work(host)  # until the host is left out: no candidate was charged, none failed

    records = sweep.records()
    tried = [r for r in records if r.status == "requeued"]
    assert len(tried) == hosts.HOST_FAILURES and all(r.cause == "host" for r in tried)
    assert not [r for r in records if r.status == "failed"]
    queued = {r.stack for r in records if r.state == "WAITING"}
    assert {r.stack for r in tried} <= queued  # each candidate waits to run again, on a host that works
    lines = [line for line in sweep.events if "failed it, not its candidate" in line]
    assert len(lines) == hosts.HOST_FAILURES
    assert (
        "(The host gpu-a could not be reached (host).)" in lines[0] and "a is tried again in 0 s" in lines[0]
    )
    assert lines[-1].endswith(
        f"a takes no more trials in this run: it failed {hosts.HOST_FAILURES} in a row itself "
        "(fix it, then run the sweep again)"
    )
