"""The rollout and its Automation API adapter against the real Pulumi CLI: bad input stops a
rollout before any update, an update that fails before its benchmark is no regression, a
tightened gate judges the result measured before, whose regression a hand-back that fails reports,
and the lock a killed update left is let go only when no process of it runs.

The rollout that hands the host back after a regression measured anew is in test_campaign.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sglang_stacks.drive import automation
from sglang_stacks.drive.rollout import rollout
from sglang_stacks.errors import SpecError, failure_from_output
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import find_project_dir
from sglang_stacks.results import history
from sglang_stacks.results.stats import BenchmarkResult
from tests._pulumi import Workspace, emulator_stack, free_port

pytestmark = pytest.mark.integration

HAND_BACK = "  sglang-stacks:gate:\n    baseline_stack: baseline\n    on_regression: hand_back\n"
DOOMED = "    cuda_graph_max_bs: 128\n    enable_flashinfer_allreduce_fusion: true\n"
"""Server flags that preflight stops on the emulated SM120 host: an update that fails in seconds."""


@pytest.fixture
def project(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """The workspace's environment (backend, passphrase, history file) for the code under test."""
    workspace.extra_env[history.ENV_VAR] = str(workspace.backend / "history.sqlite")
    workspace.enter(monkeypatch)
    return workspace


def test_the_project_folder_is_found_upward_like_pulumi_finds_it(project: Workspace, tmp_path: Path) -> None:
    inner = project.path / "stacks"
    assert find_project_dir(inner) == project.path
    with pytest.raises(SpecError, match=r"No Pulumi\.yaml in .* Run this from the sglang-stacks project"):
        find_project_dir(tmp_path)


def test_outputs_of_a_stack_never_deployed_are_empty(project: Workspace) -> None:
    project.run("stack", "init", "fresh")

    assert automation.stack_outputs("fresh", project.path) == {}
    with pytest.raises(SpecError, match=r"no stack 'typo'.*`pulumi stack ls`"):
        automation.stack_outputs("typo", project.path)


def test_a_baseline_the_backend_lacks_stops_the_rollout_before_any_update(project: Workspace) -> None:
    project.init_stack("candidate", emulator_stack(port=free_port(), state_dir=project.path, extra=HAND_BACK))
    out = io.StringIO()

    with pytest.raises(SpecError, match=r"The backend has no stack 'baseline'"):
        rollout("candidate", db_path=history.default_history_path(), project_dir=project.path, out=out)

    assert out.getvalue() == ""
    assert project.json("stack", "history", "--json", "-s", "candidate") == []


def test_an_invalid_stack_file_is_bad_input(project: Workspace) -> None:
    project.init_stack("broken", "config:\n  sglang-stacks:server:\n    tp_sise: 8\n")

    with pytest.raises(SpecError, match=r"tp_sise"):
        rollout("broken", db_path=history.default_history_path(), project_dir=project.path)


def test_an_update_that_fails_before_its_benchmark_is_no_regression(project: Workspace) -> None:
    config = emulator_stack(port=free_port(), state_dir=project.path, server=DOOMED, extra=HAND_BACK)
    project.init_stack("candidate", config)
    project.init_stack("baseline", emulator_stack(port=free_port(), state_dir=project.path))
    project.leave_pending(
        "candidate", ("creating", "pulumi-python:dynamic/sglang:Server", "candidate-server")
    )
    out, err = io.StringIO(), io.StringIO()

    code = rollout(
        "candidate", db_path=history.default_history_path(), project_dir=project.path, out=out, err=err
    )

    assert code == ExitCode.UPDATE_FAILED
    streamed = out.getvalue() + err.getvalue()
    assert "rollout: pulumi up -s candidate" in streamed
    assert "flashinfer" in streamed  # Pulumi's own output, streamed: the preflight error
    # Its record, which a sweep classifies a trial by from the trial's log, is not shown to people.
    assert failure_from_output(streamed) is None and "sglang-stacks-failure:" not in streamed
    assert "not at its regression gate" in out.getvalue()
    assert (
        "rollout: stack candidate has 1 pending operation(s) that interrupted updates left (creating "
        "candidate-server (sglang:Server)); Pulumi keeps them, one more for each killed update. "
        "`sglang-stacks recover candidate` clears"
    ) in out.getvalue()
    assert "pulumi up -s baseline" not in streamed  # nothing handed back
    assert project.json("stack", "history", "--json", "-s", "baseline") == []


def test_a_tightened_gate_judges_the_result_before_and_a_failed_hand_back_says_so(project: Workspace) -> None:
    port, db = free_port(), history.default_history_path()
    room = HAND_BACK + "    tolerance_pct: 100\n"
    project.init_stack("candidate", emulator_stack(port=port, state_dir=project.path, extra=room))
    project.init_stack("baseline", emulator_stack(port=port, state_dir=project.path, server=DOOMED))
    # A baseline far faster than the emulator, recorded as a benchmark of the same workload would be.
    fast = BenchmarkResult(
        concurrency=1,
        input_len=32,
        output_len=48,
        repetitions=3,
        tok_s_mean=1000.0,
        tok_s_stdev=1.0,
        tok_s_ci95=(997.5, 1002.5),
        tok_s_runs=(999.0, 1000.0, 1001.0),
        requests=3,
        errors=0,
    )
    history.record(db, "baseline", "0123456789abcdef", "0.5.8", "python -m sglang.launch_server", fast)
    try:
        first = io.StringIO()
        assert rollout("candidate", db_path=db, project_dir=project.path, out=first) == 0
        tok_s = project.outputs("candidate")["tok_s"]
        assert first.getvalue().splitlines()[-1] == (
            f"rollout: candidate is up at {tok_s:.1f} tok/s, past its gate against baseline."
        )
        project.run("config", "set", "--path", "gate.tolerance_pct", "5", "-s", "candidate")
        out, err = io.StringIO(), io.StringIO()

        code = rollout("candidate", db_path=db, project_dir=project.path, out=out, err=err)

        assert code == ExitCode.REGRESSION
        lines = out.getvalue().splitlines()
        assert len(history.rows(db, ["candidate"])) == 1  # judged on the result measured before
        # The gate's error, as Pulumi shows it, says the numbers once; the rollout refers to it, and
        # the error's record (for drivers) is not shown.
        verdicts = [line for line in lines if "than baseline's 1000.0 tok/s" in line]
        assert len(verdicts) == 1 and "beyond the 5 % tolerance" in verdicts[0], verdicts
        assert "rollout: candidate regressed, as its gate's error above says." in lines
        assert failure_from_output(out.getvalue() + err.getvalue()) is None
        assert "rollout: pulumi up -s baseline" in lines
        assert lines[-1] == (
            "rollout: handing the host back to baseline failed (see above); run `pulumi up -s baseline` "
            "yourself once the cause is fixed."
        )
    finally:
        project.run("destroy", "--yes", "-s", "candidate", check=False)
