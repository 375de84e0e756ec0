"""Campaign sweeps through the real CLI, Automation API and emulator: a campaign on a pool of two
emulator hosts, interrupted with Ctrl-C midway and resumed, a trial that fails without stopping the
sweep, the report's files and the winner's promotion.

The campaign here is a short one (five trials, a small workload, fast emulator startup); the
shipped campaign's plan is checked in test_campaign_plan. The tests share one workspace and run in
file order: each step is what a user does next.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sglang_stacks.results import history
from tests._pulumi import Workspace, emulator_stack, free_port

pytestmark = pytest.mark.integration

CAMPAIGN = """\
description: bs 128 at three memory fractions, bs 512, and one launch NCCL cannot capture
base: base
axes:
  - name: variant
    labels: [bs128-auto, bs128-0.82, bs128-0.88, bs512-auto, bs128-nccl-tree]
    zip:
      server.cuda_graph_max_bs:   [128, 128, 128, 512, 128]
      server.mem_fraction_static: [auto, 0.82, 0.88, auto, auto]
      environment.env.NCCL_ALGO:  [auto, auto, auto, auto, "Tree,Ring"]
workload: {{input_len: 32, output_len: 128, warmup_requests: 1, repetitions: 4, requests_per_repetition: 1}}
pool:
  - name: emu-a
    host: {{kind: emulator, state_dir: {tmp}/emu-a/host}}
    port: {port_a}
    emulator_state_dir: {tmp}/emu-a/gpus
  - name: emu-b
    host: {{kind: emulator, state_dir: {tmp}/emu-b/host}}
    port: {port_b}
    emulator_state_dir: {tmp}/emu-b/gpus
objective: {{metric: tok_s, concurrency: 1}}
"""


@dataclass(frozen=True)
class Project:
    workspace: Workspace
    tmp: Path
    ports: tuple[int, int]
    history_path: Path

    def sweep(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "sglang_stacks.cli", "sweep", *args],
            cwd=self.workspace.path,
            env=self.workspace.env(),
            capture_output=True,
            text=True,
            timeout=900,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"sweep {args} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    def state(self) -> dict[str, dict[str, Any]]:
        path = self.workspace.path / "reports" / "pool" / "sweep.json"
        return json.loads(path.read_text())["trials"] if path.exists() else {}

    def nothing_left_behind(self) -> None:
        """No server listens on a pool port, no emulated GPU is used, no claim is held."""
        for port in self.ports:
            with socket.socket() as sock:
                assert sock.connect_ex(("127.0.0.1", port)) != 0, f"a server still listens on {port}"
        for host in ("emu-a", "emu-b"):
            assert list((self.tmp / host / "gpus").glob("*.json")) == []
            assert not (self.tmp / host / "host" / "claim.json").exists()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    tmp = tmp_path_factory.mktemp("sweep")
    workspace = Workspace.create(tmp)
    history_path = tmp / "history.sqlite"
    workspace.extra_env[history.ENV_VAR] = str(history_path)
    ports = (free_port(), free_port())
    workspace.init_stack("base", emulator_stack(port=ports[0], state_dir=tmp / "base"))
    (workspace.path / "campaigns").mkdir()
    (workspace.path / "campaigns" / "pool.yaml").write_text(
        CAMPAIGN.format(tmp=tmp, port_a=ports[0], port_b=ports[1])
    )
    yield Project(workspace, tmp, ports, history_path)


def test_a_sweep_interrupted_with_ctrl_c_resumes_without_repeating_a_trial(project: Project) -> None:
    sweep = subprocess.Popen(
        [sys.executable, "-m", "sglang_stacks.cli", "sweep", "run", "pool"],
        cwd=project.workspace.path,
        env=project.workspace.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        statuses = [t["status"] for t in project.state().values()]
        if statuses.count("done") >= 1 and "running" in statuses:
            break
        assert sweep.poll() is None, sweep.communicate()[0]
        time.sleep(0.5)
    os.killpg(sweep.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends to the whole job
    output, _ = sweep.communicate(timeout=300)

    assert sweep.returncode == 130, output
    assert "interrupted" in output
    first = project.state()
    assert {t["status"] for t in first.values()} <= {"done", "failed", "pending"}, first
    project.nothing_left_behind()

    resumed = project.sweep("run", "pool")

    final = project.state()
    assert len(final) == 5
    assert sorted(t["status"] for t in final.values()).count("done") == 4
    for stack, trial in first.items():
        if trial["status"] in ("done", "failed"):
            assert f"{stack} started" not in resumed.stdout  # finished trials are not run again
    benchmarked = [row.stack for row in history.rows(project.history_path)]
    assert sorted(benchmarked) == sorted(set(benchmarked))  # no trial benchmarked twice
    assert len(benchmarked) == 4
    assert {t["host"] for t in final.values()} == {"emu-a", "emu-b"}
    project.nothing_left_behind()


def test_the_two_hosts_ran_trials_at_the_same_time(project: Project) -> None:
    spans = {
        host: [(t["started_at"], t["finished_at"]) for t in project.state().values() if t["host"] == host]
        for host in ("emu-a", "emu-b")
    }
    overlapping = [(a, b) for a in spans["emu-a"] for b in spans["emu-b"] if a[0] < b[1] and b[0] < a[1]]
    assert overlapping, spans


def test_a_failing_trial_is_recorded_with_its_cause_and_the_sweep_went_on(project: Project) -> None:
    failed = [t for t in project.state().values() if t["status"] == "failed"]

    assert [t["labels"]["variant"] for t in failed] == ["bs128-nccl-tree"]
    assert failed[0]["cause"] == "nccl"
    stack_file = project.workspace.path / "stacks" / f"Pulumi.{next(iter(project.state()))}.yaml"
    assert "Written by `sglang-stacks sweep run`" in stack_file.read_text()


def test_the_report_ranks_bs128_first_and_says_which_fractions_are_within_noise(project: Project) -> None:
    result = project.sweep("report", "pool")

    folder = project.workspace.path / "reports" / "pool"
    report = (folder / "report.md").read_text()
    for figure in ("objective.png", "pareto.png", "axes.png"):
        assert (folder / figure).stat().st_size > 5000
        assert f"]({figure})" in report
    table = report.split("## Ranking", 1)[1].split("##", 1)[0]
    ranking = [line for line in table.splitlines() if line.startswith("| ") and "`pool-" in line]
    assert len(ranking) == 4
    assert "bs128" in ranking[0]
    assert "bs512-auto" in ranking[-1] and "significantly worse" in ranking[-1]
    assert "within noise" in result.stdout
    assert "| `pool-" in report and "nccl" in report


def test_promote_writes_the_winners_flags_into_the_target_stack(project: Project) -> None:
    base_file = project.workspace.path / "stacks" / "Pulumi.base.yaml"
    before = base_file.read_text()

    result = project.sweep("promote", "pool", "--to", "base", "--yes")

    after = base_file.read_text()
    assert "leads at" in result.stdout
    changed = {line for line in after.splitlines() if line not in before.splitlines()}
    assert all("mem_fraction_static" in line for line in changed), changed
    assert f"port: {project.ports[0]}" in after  # the pool port did not travel into the target
