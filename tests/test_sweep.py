"""Campaign sweeps through the real CLI, Automation API and emulator: a campaign on a pool of two
emulator hosts, interrupted with Ctrl-C midway and resumed, a trial that fails without stopping the
sweep, the report's files, the winner's promotion and the preview it makes, and two trials on a pool
host reached over SSH (a real sshd), with its key given to each trial stack only as a secret and
the clearly slower one stopped early.

The campaign here is a short one (five trials, a small workload, fast emulator startup); the
shipped campaign's plan is checked in test_campaign_plan. The tests share one workspace and run in
file order: each step is what a user does next.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from sqlalchemy.exc import IntegrityError

from sglang_stacks.campaign.attributes import records
from sglang_stacks.campaign.study import STUDY_FILE
from sglang_stacks.config.spec import EMULATOR_HOST_FACTS
from sglang_stacks.results import history
from tests._pulumi import Workspace, emulator_stack, free_port
from tests.sshd import SshServer, start_sshd

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


def study_trials(project: Path, campaign: str) -> dict[str, dict[str, Any]]:
    """Each trial stack's latest trial in ``campaign``'s study, as the study records it."""
    path = project / "reports" / campaign / STUDY_FILE
    if not path.exists():
        return {}
    try:
        study = optuna.load_study(study_name=campaign, storage=_reader(path))
    except (KeyError, IntegrityError):
        return {}  # the database is there, the study not yet (or being made right now)
    latest = {r.stack: r.model_dump() for r in records(study) if r.status not in ("duplicate", "infeasible")}
    return {s: t | {"status": "pending"} if t["state"] == "WAITING" else t for s, t in latest.items()}


@dataclass(frozen=True)
class Project:
    workspace: Workspace
    tmp: Path
    ports: tuple[int, int]
    history_path: Path

    def sweep(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.workspace.cli("sweep", *args, check=check)

    def state(self, campaign: str = "pool") -> dict[str, dict[str, Any]]:
        """Each trial stack's latest trial in the campaign's study (``pending`` while queued)."""
        return study_trials(self.workspace.path, campaign)

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
    # Every candidate sets cuda_graph_max_bs, so the base's 256 changes no trial; it makes the
    # deployed base differ from any winner in that flag.
    base = emulator_stack(port=ports[0], state_dir=tmp / "base", server="    cuda_graph_max_bs: 256\n")
    workspace.init_stack("base", base)
    (workspace.path / "campaigns").mkdir()
    (workspace.path / "campaigns" / "pool.yaml").write_text(
        CAMPAIGN.format(tmp=tmp, port_a=ports[0], port_b=ports[1])
    )
    yield Project(workspace, tmp, ports, history_path)
    workspace.run(
        "destroy", "--yes", "--skip-preview", "-s", "base", check=False
    )  # deployed by promote's test


def test_a_sweep_interrupted_with_ctrl_c_resumes_without_repeating_a_trial(project: Project) -> None:
    sweep = subprocess.Popen(
        project.workspace.cli_command("sweep", "run", "pool"),
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
    # The first line says what the run does now, not what the plan left for later.
    assert output.splitlines()[0] == (
        "sweep pool: 5 candidates, each kept by preflight; running them on 2 pool hosts (emu-a, emu-b), "
        "one trial per host at a time. Ctrl-C stops it; the same command resumes."
    ), output
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


def test_a_finished_sweep_leaves_no_trial_stack_in_the_backend_or_stacks(project: Project) -> None:
    listed = {stack["name"] for stack in project.workspace.json("stack", "ls", "--json")}
    files = {path.name for path in (project.workspace.path / "stacks").glob("Pulumi.*.yaml")}

    assert listed == {"base"}, listed
    assert files == {"Pulumi.base.yaml"}, files
    assert len(project.state()) == 5  # the results stay in the study, and each trial's log
    assert len(list((project.workspace.path / "reports" / "pool" / "logs").glob("pool-*.log"))) == 5


def test_the_budget_is_given_on_the_command_line(project: Project) -> None:
    refused = project.sweep("run", "pool", "--max-trials", "0", check=False)
    assert refused.returncode == 2 and "--max-trials: '0' is not a whole number above 0" in refused.stderr

    capped = project.sweep("run", "pool", "--max-trials", "2", "--max-hours", "6")

    assert "until budget max_trials 2, max_hours 6." in capped.stdout.splitlines()[0]
    assert "The search stopped: budget.max_trials 2 reached." in capped.stdout
    assert "started on" not in capped.stdout
    # Fewer trials than candidates: the run searches (tpe) instead of running them all, and the
    # report, made without the command line's budget, names the search the run said it made.
    assert "searching them with tpe" in capped.stdout.splitlines()[0]
    project.sweep("report", "pool")
    report = (project.workspace.path / "reports" / "pool" / "report.md").read_text()
    assert "\nSearch: tpe (seed " in report, report.split("## Verdict")[0]


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
    # bs 128 at three memory fractions is one server in effect (the same single-stream decode in
    # the emulator's model), measured in three launches over the two hosts of a loaded machine:
    # never split, whatever each launch's offset. Welch's test on the repetitions alone called such
    # a pair "a clear winner" at 0.2 % apart.
    same = [line for line in ranking if "bs128-" in line]
    assert len(same) == 3 and all("significantly worse" not in line for line in same), "\n".join(ranking)
    assert "within noise" in result.stdout and "a clear winner" not in result.stdout
    assert "| `pool-" in report and "nccl" in report


def _server_section(path: Path) -> dict[str, Any]:
    section: dict[str, Any] = yaml.safe_load(path.read_text())["config"]["sglang-stacks:server"]
    return section


def test_promote_writes_the_winners_flags_and_preview_shows_exactly_them(project: Project) -> None:
    project.workspace.run("up", "--yes", "--skip-preview", "-s", "base")  # the host serves the base
    base_file = project.workspace.path / "stacks" / "Pulumi.base.yaml"
    before, deployed = base_file.read_text(), _server_section(base_file)

    result = project.sweep("promote", "pool", "--to", "base", "--yes")

    after, promoted = base_file.read_text(), _server_section(base_file)
    assert "leads at" in result.stdout
    winner = next(t for s, t in project.state().items() if result.stdout.startswith(f"{s} ("))
    changed_lines = {line for line in after.splitlines() if line not in before.splitlines()}
    assert changed_lines and all(
        "mem_fraction_static" in line or "cuda_graph_max_bs: 128" in line for line in changed_lines
    ), changed_lines
    assert f"port: {project.ports[0]}" in after  # the pool port did not travel into the target

    preview = project.workspace.json("preview", "--diff", "--json", "-s", "base")

    server = next(
        step for step in preview["steps"] if step["urn"].endswith("::base-server") and step["op"] != "refresh"
    )
    assert server["op"] == "replace" and "flags" in server["replaceReasons"]
    old_flags, new_flags = server["oldState"]["inputs"]["flags"], server["newState"]["inputs"]["flags"]
    changed = {flag for flag in {*old_flags, *new_flags} if old_flags.get(flag) != new_flags.get(flag)}
    # Exactly the flags in which the winner's server section differs from the deployed base's.
    assert changed == {key for key in {*deployed, *promoted} if deployed.get(key) != promoted.get(key)}
    assert new_flags["cuda_graph_max_bs"] == 128
    fraction = winner["labels"]["variant"].removeprefix("bs128-")
    assert new_flags.get("mem_fraction_static") == (None if fraction == "auto" else float(fraction))


REMOTE = """\
description: a host reached over SSH, its key from the base stack; the kernel over PCIe stops early
base: base
axes:
  - {{key: environment.runtime, values: [emulator]}}
  - {{key: server.disable_custom_all_reduce, values: [true, false]}}
workload: {{input_len: 32, output_len: 64, warmup_requests: 1, repetitions: 4, requests_per_repetition: 1}}
early_stop: {{after_repetitions: 2}}
pool:
  - name: ssh-a
    host: {{kind: ssh, address: {address}, port: {ssh_port}, user: {user}, host_key: "{host_key}",
            state_dir: {tmp}/ssh-a/host, {facts}}}
    port: {port}
    emulator_state_dir: {tmp}/ssh-a/gpus
"""


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    with start_sshd() as server:
        yield server


def _command_lines(seen: set[str], done: threading.Event) -> None:
    """Every process's command line, sampled until ``done``."""
    while not done.is_set():
        for path in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                seen.add(path.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        time.sleep(0.02)


def test_an_ssh_pool_host_gets_its_key_only_as_a_secret_of_the_trial_stack(
    project: Project, sshd: SshServer
) -> None:
    port = _remote_campaign(project, sshd, "remote", "emulator")
    refused = project.sweep("run", "remote", check=False)
    assert refused.returncode == 2
    assert "pool.0.ssh_key_stack (default: base) is 'base', whose stack file has no sshPrivateKey" in (
        refused.stderr
    )
    assert not list((project.workspace.path / "stacks").glob("Pulumi.remote-*.yaml"))  # nothing launched
    project.workspace.run("config", "set", "--secret", "sshPrivateKey", "-s", "base", stdin=sshd.client_key)
    token = "hf_" + secrets.token_hex(16)  # gated models download with it: every trial needs it too
    project.workspace.run("config", "set", "--secret", "hubToken", "-s", "base", stdin=token)
    logins = sshd.connections()
    seen: set[str] = set()
    done = threading.Event()
    watcher = threading.Thread(target=_command_lines, args=(seen, done), daemon=True)
    watcher.start()
    try:
        ran = project.sweep("run", "remote", "--keep-trial-stacks")
    finally:
        done.set()
        watcher.join()

    trials = project.state("remote")
    assert [(t["status"], t["host"]) for t in trials.values()] == [("done", "ssh-a")] * 2, trials
    assert sshd.connections() > logins  # the trials reached their host through the sshd
    for stack in trials:
        listed = project.workspace.run("config", "-s", stack).stdout
        stack_file = project.workspace.path / "stacks" / f"Pulumi.{stack}.yaml"
        for key in ("sshPrivateKey", "hubToken"):
            assert re.search(rf"^{key}\s+\[secret\]$", listed, re.MULTILINE), listed
            secret = yaml.safe_load(stack_file.read_text())["config"][f"sglang-stacks:{key}"]
            assert set(secret) == {"secure"} and secret["secure"].startswith("v1:")
        shown = project.workspace.run("config", "get", "hubToken", "-s", stack).stdout.strip()
        assert shown == token
    body = sshd.client_key.strip().splitlines()[2]
    places = [
        project.workspace.path / "stacks",
        project.workspace.path / "reports",
        project.workspace.backend,
    ]
    files = [f for place in places for f in place.rglob("*") if f.is_file()]
    for value in (body, token):
        assert files and not [f for f in files if value in f.read_text(errors="replace")]
        assert value not in ran.stdout + ran.stderr
        assert seen and not [line for line in seen if value in line]  # never on a command line
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0  # the trial's server is gone
    assert not (project.tmp / "ssh-a" / "host" / "claim.json").exists()


def test_a_candidate_clearly_worse_after_its_first_repetitions_is_stopped_early(project: Project) -> None:
    trials = project.state("remote")
    by_kernel = {t["labels"]["server.disable_custom_all_reduce"]: (s, t) for s, t in trials.items()}
    fast_stack, fast = by_kernel["true"]  # NCCL: the faster, measured first and in full
    slow_stack, slow = by_kernel["false"]  # the custom all-reduce kernel over PCIe

    assert fast["stopped_early"] is None and len(fast["levels"][0]["tok_s_runs"]) == 4
    assert len(slow["levels"][0]["tok_s_runs"]) == 2
    assert slow["stopped_early"].startswith("after 2 of 4 repetitions its mean ")
    assert f"% below the best's ({fast_stack}: " in slow["stopped_early"]
    # The fast trial ran its repetitions in two parts, the stopped one only its first.
    rows = [row.stack for row in history.rows(project.history_path, [fast_stack, slow_stack])]
    assert sorted(rows) == sorted([fast_stack, fast_stack, slow_stack])

    project.sweep("report", "remote")

    report = (project.workspace.path / "reports" / "remote" / "report.md").read_text()
    stopped = report.split("## Stopped early", 1)[1].split("##", 1)[0]
    assert f"`{slow_stack}`" in stopped and "% below the best's" in stopped
    row = next(line for line in report.splitlines() if line.startswith("| 2 |"))
    assert slow_stack in row and "significantly worse, stopped early" in row


def _reader(path: Path) -> optuna.storages.RDBStorage:
    """The study's database, read beside a running sweep without creating anything in it."""
    return optuna.storages.RDBStorage(f"sqlite:///{path}", skip_table_creation=True)


def _remote_campaign(project: Project, sshd: SshServer, name: str, runtime: str, **facts: Any) -> int:
    """Writes campaign ``name``: the REMOTE pool host (this sshd) declaring the emulator's facts
    changed by ``facts``, its trials on ``runtime``; returns the trials' server port."""
    declared = {**EMULATOR_HOST_FACTS, **facts}
    port = free_port()
    text = REMOTE.format(
        address=sshd.host,
        ssh_port=sshd.port,
        user=sshd.user,
        host_key=sshd.host_key,
        tmp=project.tmp,
        facts=", ".join(f"{key}: {json.dumps(value)}" for key, value in declared.items()),
        port=port,
    )
    text = text.replace("values: [emulator]}", f"values: [{runtime}]}}")
    (project.workspace.path / "campaigns" / f"{name}.yaml").write_text(text)
    return port


def test_a_pool_host_whose_gpus_differ_from_its_declared_facts_is_refused_at_load(
    project: Project, sshd: SshServer
) -> None:
    """Its trials' host probe would fail each of them; the sweep says so before making anything."""
    project.workspace.run("config", "set", "--secret", "sshPrivateKey", "-s", "base", stdin=sshd.client_key)
    _remote_campaign(project, sshd, "otherfacts", "emulator", gpu_model="NVIDIA H100 80GB HBM3")

    refused = project.sweep("run", "otherfacts", check=False)

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "1 problem(s) with the GPUs of campaign otherfacts's pool:" in refused.stderr
    model = EMULATOR_HOST_FACTS["gpu_model"]  # what the emulator's nvidia-smi reports
    assert (
        "pool.0 (ssh-a), trials on the emulator: pool.0.host.gpu_model declares 'NVIDIA H100 80GB HBM3' "
        f"but GPU 0 is {model!r}; set pool.0.host.gpu_model to {model!r}"
    ) in refused.stderr, refused.stderr
    assert "nothing was created" in refused.stderr
    assert not list((project.workspace.path / "stacks").glob("Pulumi.otherfacts-*.yaml"))
    assert not (project.workspace.path / "reports" / "otherfacts").exists()  # no study either


def test_a_pool_host_for_real_sglang_is_probed_over_ssh_at_load(project: Project, sshd: SshServer) -> None:
    """Trials running real SGLang there probe it with its nvidia-smi, logging in with the pool's key:
    this machine's sshd has none, which is named before anything is made."""
    project.workspace.run("config", "set", "--secret", "sshPrivateKey", "-s", "base", stdin=sshd.client_key)
    _remote_campaign(project, sshd, "nodriver", "sglang")
    logins = sshd.connections()

    refused = project.sweep("run", "nodriver", check=False)

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert sshd.connections() > logins  # it logged in with the key its trials get
    assert "pool.0 (ssh-a), trials on SGLang: `nvidia-smi` failed on" in refused.stderr
    assert "is not installed there; install the NVIDIA driver" in refused.stderr
    assert not list((project.workspace.path / "stacks").glob("Pulumi.nodriver-*.yaml"))
    body = sshd.client_key.strip().splitlines()[2]
    assert body not in refused.stdout + refused.stderr
