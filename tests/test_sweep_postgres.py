"""Two `sweep run` drivers share one campaign study in a real PostgreSQL server, as two machines
would: each has its own project folder, Pulumi backend and pool (one emulator host each), and both
name the same database in the campaign file's `storage:` (without its password, which only a libpq
password file holds). Every candidate runs once, on one of the two pools, and a report from either
machine covers the trials of both. The dashboard, served from the second machine, shows the same
study in a real headless Chromium, and the second machine promotes a trial the first one ran, not
the winner. The database password is in no file or output of either.

The PostgreSQL server is the test's own cluster on 127.0.0.1 and a free port (tests/postgres.py);
scripts/ensure-postgres.sh installs the programs it runs.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import pytest
import yaml

from sglang_stacks.campaign.attributes import records
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.study import open_study
from sglang_stacks.results import history
from tests._pulumi import Workspace, emulator_stack, free_port
from tests.browser import dashboard_url, read_dashboard
from tests.postgres import PostgresServer, start_postgres

pytestmark = pytest.mark.integration

NAME = "shared"
CAMPAIGN = """\
description: two CUDA-graph batch sizes, searched by two machines at once
base: base
axes:
  - key: server.cuda_graph_max_bs
    values: [128, 512]
workload: {{input_len: 32, output_len: 48, warmup_requests: 1, repetitions: 2, requests_per_repetition: 1}}
pool:
  - name: {host}
    host: {{kind: emulator, state_dir: {tmp}/host}}
    port: {port}
    emulator_state_dir: {tmp}/gpus
objective: {{metric: tok_s, concurrency: 1}}
search: {{strategy: grid}}
storage: {storage}
"""
"""Each machine's campaign file: the same campaign and storage, its own pool."""


@dataclass(frozen=True)
class Machine:
    """One driver's project folder, backend and pool host."""

    host: str
    workspace: Workspace
    tmp: Path

    def sweep(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.workspace.cli("sweep", *args)


@dataclass(frozen=True)
class Shared:
    postgres: PostgresServer
    storage: str
    machines: tuple[Machine, Machine]
    history_path: Path
    outputs: list[str] = field(default_factory=list)
    """What every command of the tests printed."""

    def study(self) -> optuna.Study:
        return optuna.load_study(study_name=NAME, storage=self.storage)


@pytest.fixture(scope="module")
def shared(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch
) -> Iterator[Shared]:
    tmp = tmp_path_factory.mktemp("shared")
    history_path = tmp / "history.sqlite"
    with start_postgres() as postgres:
        storage = postgres.create_database("campaigns")
        monkeypatch_module.setenv(
            "PGPASSFILE", str(postgres.password_file)
        )  # this process reads the study too
        # One base stack file for both, as a repository shared by two machines has: a candidate is
        # the same stack (the same digest of its sections) whichever machine runs it.
        base = emulator_stack(port=free_port(), state_dir=tmp / "base")
        machines = []
        for host in ("gpu-a", "gpu-b"):
            folder = tmp / host
            workspace = Workspace.create(folder)
            workspace.extra_env.update(postgres.env())
            workspace.extra_env[history.ENV_VAR] = str(history_path)  # one history: a trial run twice shows
            port = free_port()
            workspace.init_stack("base", base)
            (workspace.path / "campaigns").mkdir()
            (workspace.path / "campaigns" / f"{NAME}.yaml").write_text(
                CAMPAIGN.format(host=host, tmp=folder, port=port, storage=storage), encoding="utf-8"
            )
            machines.append(Machine(host, workspace, folder))
        yield Shared(postgres, storage, (machines[0], machines[1]), history_path)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_drivers_opening_one_empty_database_at_once_all_open_the_one_study(shared: Shared) -> None:
    # Optuna creates its tables in an empty database on first use; four drivers starting together
    # all did, and all but one failed on PostgreSQL's catalogue (a duplicate key), before the
    # schema lock.
    storage = shared.postgres.create_database("empty")
    path = shared.machines[0].tmp / "empty.yaml"
    path.write_text(
        CAMPAIGN.format(host="gpu-a", tmp=shared.machines[0].tmp, port=1, storage=storage), encoding="utf-8"
    )
    campaign = load_campaign(path)
    opened: list[int] = []
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            opened.append(open_study(NAME, campaign, shared.machines[0].tmp)._study_id)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(opened) == 4 and len(set(opened)) == 1


def test_two_drivers_with_their_own_pools_run_every_candidate_once(shared: Shared) -> None:
    results: dict[str, subprocess.CompletedProcess[str]] = {}

    def drive(machine: Machine) -> None:
        results[machine.host] = machine.sweep("run", NAME)

    drivers = [threading.Thread(target=drive, args=(m,)) for m in shared.machines]
    for driver in drivers:
        driver.start()
    for driver in drivers:
        driver.join()
    shared.outputs.extend(r.stdout + r.stderr for r in results.values())
    for host, result in results.items():
        assert result.returncode == 0, f"{host}:\n{result.stdout}\n{result.stderr}"

    found = records(shared.study())
    done = [r for r in found if r.status == "done"]
    table = "\n".join(f"{r.number} {r.state} {r.status} {r.stack} {r.host} {r.duplicate_of}" for r in found)
    assert sorted(r.labels["server.cuda_graph_max_bs"] for r in done) == ["128", "512"], table
    assert len({r.stack for r in done}) == 2
    # Both pools ran a trial of the one study (each driver took one of the two at its start).
    assert {r.host for r in done} == {"gpu-a", "gpu-b"}, table
    benchmarked = [row.stack for row in history.rows(shared.history_path)]
    assert sorted(benchmarked) == sorted(r.stack for r in done)  # none benchmarked twice


def test_a_report_from_either_machine_covers_the_trials_of_both(shared: Shared) -> None:
    machine = shared.machines[0]
    result = machine.sweep("report", NAME)
    shared.outputs.append(result.stdout + result.stderr)
    assert result.returncode == 0, result.stderr
    report = (machine.workspace.path / "reports" / NAME / "report.md").read_text(encoding="utf-8")
    done = [r for r in records(shared.study()) if r.status == "done"]
    ran_elsewhere = [r.stack for r in done if r.host != machine.host]
    assert ran_elsewhere, "the other machine ran no trial"
    for record in done:
        assert f"`{record.stack}`" in report
    folder = machine.workspace.path / "reports" / NAME
    for figure in ("pareto.png", "history.png"):  # the serving plane and the search history, linked
        assert (folder / figure).stat().st_size > 5000
        assert f"]({figure})" in report


def test_the_dashboard_on_the_other_machine_shows_the_shared_study(shared: Shared) -> None:
    machine = shared.machines[1]
    study = shared.study()
    server = subprocess.Popen(
        machine.workspace.cli_command("sweep", "dashboard", NAME),
        cwd=machine.workspace.path,
        env=machine.workspace.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        view = read_dashboard(dashboard_url(server))
    finally:
        server.send_signal(signal.SIGINT)
        shared.outputs.append("".join(server.communicate(timeout=30)))
    assert view.trials == len(study.trials)
    assert (view.best_number, view.best_value) == (study.best_trial.number, study.best_value)


def test_any_measured_trial_is_promoted_on_request_not_only_the_winner(shared: Shared) -> None:
    machine = shared.machines[1]
    study = shared.study()
    done = [r for r in records(study) if r.status == "done"]
    other = next(r for r in done if r.number != study.best_trial.number)
    result = machine.sweep("promote", NAME, "--trial", other.stack, "--to", "base", "--yes")
    shared.outputs.append(result.stdout + result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        f"Promoting {other.stack} (cuda_graph_max_bs={other.labels['server.cuda_graph_max_bs']}), as asked"
        in (result.stdout)
    )
    base = yaml.safe_load(
        (machine.workspace.path / "stacks" / "Pulumi.base.yaml").read_text(encoding="utf-8")
    )
    assert base["config"]["sglang-stacks:server"]["cuda_graph_max_bs"] == int(
        other.labels["server.cuda_graph_max_bs"]
    )

    unknown = machine.sweep("promote", NAME, "--trial", "shared-00000000", "--to", "base", "--yes")
    assert unknown.returncode == 2
    assert all(r.stack in unknown.stderr for r in done)  # the measured trials to choose from


def test_the_database_password_is_in_no_file_or_output_of_either_machine(shared: Shared) -> None:
    password = shared.postgres.password_file.read_text(encoding="utf-8").strip().rsplit(":", 1)[1]
    for machine in shared.machines:
        for path in [
            *(machine.workspace.path / "reports").rglob("*"),
            *(machine.workspace.path / "campaigns").rglob("*"),
        ]:
            if path.is_file():
                assert password.encode() not in path.read_bytes(), path
    assert len(shared.outputs) == 5  # both runs, the report, the dashboard, the promotion
    for output in shared.outputs:
        assert password not in output
