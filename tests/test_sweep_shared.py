"""Several `sweep run` drivers on one campaign study in a real PostgreSQL server, each a machine of
its own (its project folder, Pulumi backend and pool; the killed one its own home and process
group), through the real CLI, Automation API and emulator hosts.

- Three drivers whose pools share hosts (two list the same two hosts under names of their own, the
  third one of those and a host of its own): a host one driver's trial holds is waited for by the
  others, never a failure of their candidate; every candidate runs once, and one report covers all.
- A driver killed on its machine while its trial's server starts: another machine's driver takes
  the trial over once its heartbeat is stale and runs the candidate on its own host; when the first
  machine runs the sweep again, it settles the stack its killed driver left.

The PostgreSQL server is the test's own cluster on 127.0.0.1 and a free port (tests/postgres.py).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

from sglang_stacks.campaign.attributes import TrialRecord, records
from sglang_stacks.campaign.study import GRACE_S
from sglang_stacks.results import history
from tests._pulumi import Workspace, emulator_stack, free_port
from tests.postgres import PostgresServer, start_postgres

pytestmark = pytest.mark.integration

NAME = "shared"
CAMPAIGN = """\
description: CUDA-graph batch sizes, searched by several machines sharing hosts
base: base
axes:
  - {{key: server.cuda_graph_max_bs, values: {sizes}}}
workload: {{input_len: 32, output_len: 48, warmup_requests: 1, repetitions: 2, requests_per_repetition: 1}}
pool:
{pool}
objective: {{metric: tok_s, at: {{concurrency: 1}}}}
search: {{strategy: grid}}
storage: {storage}
"""
HOST = """\
  - name: {name}
    host: {{kind: emulator, state_dir: {folder}/host}}
    port: {port}
    emulator_state_dir: {folder}/gpus
"""


@dataclass(frozen=True)
class Host:
    """An emulator host of the test: its folder (claim and emulated GPUs) and server port."""

    folder: Path
    port: int

    def entry(self, name: str) -> str:
        return HOST.format(name=name, folder=self.folder, port=self.port)

    def serving(self) -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def claimed(self) -> bool:
        return (self.folder / "host" / "claim.json").exists()

    def launched(self) -> bool:
        """The claim records a server process (its launch has begun)."""
        try:
            return bool(json.loads((self.folder / "host" / "claim.json").read_text()).get("server_pid"))
        except (OSError, ValueError):
            return False


@dataclass(frozen=True)
class Machine:
    """One driver's project folder, backend (and home, when it has its own) and campaign file."""

    workspace: Workspace

    def sweep(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.workspace.cli("sweep", *args, timeout_s=1800)

    def start(self) -> subprocess.Popen[str]:
        """``sweep run`` in a process group of its own, as a terminal's job runs."""
        return subprocess.Popen(
            self.workspace.cli_command("sweep", "run", NAME),
            cwd=self.workspace.path,
            env=self.workspace.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


@dataclass(frozen=True)
class Cluster:
    postgres: PostgresServer
    tmp: Path
    base: str
    """The base stack file every machine shares (one repository)."""

    def machine(self, name: str, storage: str, sizes: list[int], pool: str, *, home: bool = False) -> Machine:
        folder = self.tmp / name
        workspace = Workspace.create(folder)
        workspace.extra_env.update(self.postgres.env())
        workspace.extra_env[history.ENV_VAR] = str(self.tmp / "history.sqlite")  # a trial run twice shows
        if home:
            (folder / "home").mkdir()
            workspace.extra_env["HOME"] = str(folder / "home")
        (workspace.path / "stacks" / "Pulumi.base.yaml").write_text(self.base, encoding="utf-8")
        (workspace.path / "campaigns").mkdir()
        (workspace.path / "campaigns" / f"{NAME}.yaml").write_text(
            CAMPAIGN.format(sizes=sizes, pool=pool.rstrip("\n"), storage=storage), encoding="utf-8"
        )
        return Machine(workspace)

    def host(self, name: str) -> Host:
        folder = self.tmp / "hosts" / name
        folder.mkdir(parents=True)
        return Host(folder, free_port())

    def trials(self, storage: str) -> list[TrialRecord]:
        return records(optuna.load_study(study_name=NAME, storage=storage))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("shared-hosts")
    with pytest.MonkeyPatch.context() as patch, start_postgres() as postgres:
        patch.setenv("PGPASSFILE", str(postgres.password_file))  # this process reads the study too
        base = emulator_stack(port=free_port(), state_dir=tmp / "base")
        yield Cluster(postgres, tmp, base)


def _table(found: list[TrialRecord]) -> str:
    return "\n".join(
        f"{r.number} {r.state} {r.status} {r.stack} {r.host} {r.host_place} {r.cause} {r.message}"
        for r in found
    )


def _wait(what: str, done: Callable[[], bool], driver: subprocess.Popen[str], timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert driver.poll() is None, f"the sweep ended before {what}:\n{driver.communicate()[0]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.05)


def test_drivers_on_one_pool_and_on_overlapping_pools_run_every_candidate_once(cluster: Cluster) -> None:
    # Before, a driver whose host another driver's trial held recorded its candidate as failed
    # (cause claim), counted it against the budget and never ran it again.
    storage = cluster.postgres.create_database("pools")
    one, two, three = cluster.host("one"), cluster.host("two"), cluster.host("three")
    sizes = [32, 128, 256, 512]  # more candidates than hosts: drivers wait for each other
    machines = [
        cluster.machine("a", storage, sizes, one.entry("a-1") + two.entry("a-2")),
        cluster.machine("b", storage, sizes, one.entry("b-1") + two.entry("b-2")),  # a's pool, its names
        cluster.machine("c", storage, sizes, two.entry("c-2") + three.entry("c-3")),  # overlaps on two
    ]
    results: dict[int, subprocess.CompletedProcess[str]] = {}

    def drive(index: int) -> None:
        results[index] = machines[index].sweep("run", NAME)

    drivers = [threading.Thread(target=drive, args=(i,)) for i in range(3)]
    for driver in drivers:
        driver.start()
    for driver in drivers:
        driver.join()

    found = cluster.trials(storage)
    for result in results.values():
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{_table(found)}"
    done = [r for r in found if r.status == "done"]
    assert sorted(int(r.labels["server.cuda_graph_max_bs"]) for r in done) == sizes, _table(found)
    assert [r for r in found if r.status == "failed" or r.cause == "claim"] == [], _table(found)
    benchmarked = [row.stack for row in history.rows(cluster.tmp / "history.sqlite")]
    assert sorted(benchmarked) == sorted(r.stack for r in done)  # none benchmarked twice
    # No host ran two trials at once, whichever driver and name: the trials of each place in turn.
    for place in {r.host_place for r in done}:
        spans = sorted((r.started_at or 0, r.finished_at or 0) for r in done if r.host_place == place)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), spans
    assert len({r.host_place for r in done}) >= 2  # the pool's hosts shared the work
    report = machines[2].sweep("report", NAME)
    assert report.returncode == 0, report.stderr
    written = (machines[2].workspace.path / "reports" / NAME / "report.md").read_text(encoding="utf-8")
    assert all(f"`{r.stack}`" in written for r in done)
    for host in (one, two, three):
        assert not host.serving() and not host.claimed()


def test_a_killed_drivers_trial_is_taken_over_by_another_machine_once_its_heartbeat_is_stale(
    cluster: Cluster,
) -> None:
    storage = cluster.postgres.create_database("takeover")
    mine, theirs = cluster.host("a-only"), cluster.host("b-only")
    sizes = [128, 512]
    first = cluster.machine("killed", storage, sizes, mine.entry("gpu-a"), home=True)
    second = cluster.machine("survivor", storage, sizes, theirs.entry("gpu-b"), home=True)

    killed = first.start()
    _wait("a server starting on the first machine", mine.launched, killed)
    os.killpg(killed.pid, signal.SIGKILL)  # the driver, its Pulumi processes, their providers
    said = killed.communicate(timeout=60)[0]
    running = [r for r in cluster.trials(storage) if r.state == "RUNNING"]
    assert len(running) == 1, said
    orphaned = running[0]

    began = time.monotonic()
    survivor = second.sweep("run", NAME)

    assert survivor.returncode == 0, survivor.stdout + survivor.stderr
    assert time.monotonic() - began >= GRACE_S  # it waited for the heartbeat to go stale
    assert f"sweep: {orphaned.stack}: its driver (pid {orphaned.driver.pid if orphaned.driver else 0}" in (
        survivor.stdout
    )
    assert f"sweep: {orphaned.stack}: queued to run again" in survivor.stdout
    found = cluster.trials(storage)
    done = [r for r in found if r.status == "done"]
    assert sorted(int(r.labels["server.cuda_graph_max_bs"]) for r in done) == sizes, _table(found)
    assert {r.host for r in done} == {"gpu-b"}  # the survivor ran both, the killed one's too
    taken = next(r for r in found if r.number == orphaned.number)
    assert taken.state == "FAIL"
    assert next(r for r in done if r.stack == orphaned.stack).replaces == orphaned.number

    # The first machine comes back: it settles the stack its killed driver left (the server it had
    # launched stopped, the claim given back), and finds nothing left to run.
    back = first.sweep("run", NAME)

    assert back.returncode == 0, back.stdout + back.stderr
    assert f"sweep: {orphaned.stack}: another driver took its trial over; settling the stack" in back.stdout
    assert not mine.serving() and not mine.claimed()
    assert [r for r in cluster.trials(storage) if r.state == "RUNNING"] == []
