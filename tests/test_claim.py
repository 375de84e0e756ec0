"""The GPU claim: handover between stacks, leases of running updates, and two updates racing."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglang_stacks.errors import ClaimError
from sglang_stacks.hostops import claim, serving
from sglang_stacks.hostops.connection import Connection
from tests.sshd import SshServer, start_sshd

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    with start_sshd() as server:
        yield server


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "host-state")
    claim.finish_all()  # the updates this test process started end with the test


def test_handover_from_a_finished_update_returns_the_previous_owner(sshd: SshServer, state_dir: str) -> None:
    conn = sshd.connection()

    assert claim.acquire(conn, "baseline", takeover=False, update_id="u1", state_dir=state_dir) is None
    claim.record_server(conn, "baseline", 4242, 987654, state_dir=state_dir)
    during = claim.read(conn, state_dir=state_dir)
    claim.finish(conn, "baseline", state_dir=state_dir)
    after = claim.read(conn, state_dir=state_dir)
    with pytest.raises(ClaimError, match=r"belong to stack 'baseline'.*pulumi destroy -s baseline"):
        claim.acquire(conn, "eagle3-bs128", takeover=False, state_dir=state_dir)
    previous = claim.acquire(conn, "eagle3-bs128", takeover=True, update_id="u2", state_dir=state_dir)

    assert during is not None and during.updating and during.updating_since is not None
    assert after is not None and not after.updating and after.updating_since is None
    assert previous is not None
    assert (previous.stack, previous.server_pid, previous.server_start_ticks) == ("baseline", 4242, 987654)
    current = claim.read(conn, state_dir=state_dir)
    assert current is not None
    assert (current.stack, current.update_id, current.server_pid, current.updating) == (
        "eagle3-bs128",
        "u2",
        None,
        True,
    )


def test_running_update_is_never_taken_over(state_dir: str) -> None:
    conn = Connection.local()
    claim.acquire(conn, "baseline", takeover=False, update_id="u1", state_dir=state_dir)

    with pytest.raises(
        ClaimError, match=r"Stack 'baseline' \(update u1, since .*\) is updating the local host"
    ):
        claim.acquire(conn, "eagle3-bs128", takeover=True, state_dir=state_dir)
    claim.finish(conn, "baseline", state_dir=state_dir)
    previous = claim.acquire(conn, "eagle3-bs128", takeover=True, state_dir=state_dir)

    assert previous is not None and previous.stack == "baseline"


UPDATER = """
import json, sys, time
from pathlib import Path
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.claim import acquire

task = json.loads(Path(sys.argv[1]).read_text())
acquire(Connection(**task["connection"]), task["stack"], takeover=True, state_dir=task["state_dir"])
print("acquired", flush=True)
time.sleep(120)  # an update busy loading the model, until it is killed
"""


def start_updater(
    conn: Connection, stack: str, state_dir: str, folder: Path, script: str
) -> subprocess.Popen[str]:
    """A separate process that acquires the host for ``stack``, as a Pulumi update would."""
    task = folder / f"{stack}.json"
    task.touch(mode=0o600)  # it holds the test key
    task.write_text(
        json.dumps(
            {
                "connection": dataclasses.asdict(conn),
                "stack": stack,
                "state_dir": state_dir,
                "launched": str(folder / f"launched-{stack}"),
            }
        )
    )
    return subprocess.Popen(
        [sys.executable, "-c", script, str(task)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )


def test_killed_update_frees_the_host_within_seconds(sshd: SshServer, tmp_path: Path, state_dir: str) -> None:
    conn = sshd.connection()
    updater = start_updater(conn, "eagle3-bs128", state_dir, tmp_path, UPDATER)
    try:
        assert updater.stdout is not None and updater.stdout.readline() == "acquired\n"
        with pytest.raises(ClaimError, match=r"'eagle3-bs128' .* is updating"):
            claim.acquire(conn, "baseline", takeover=True, state_dir=state_dir)
    finally:
        updater.kill()
        updater.wait()
    killed = time.monotonic()

    previous = None
    while previous is None and time.monotonic() - killed < 10:
        try:
            previous = claim.acquire(conn, "baseline", takeover=True, state_dir=state_dir)
        except ClaimError:
            time.sleep(0.2)

    assert previous is not None and previous.stack == "eagle3-bs128"
    assert time.monotonic() - killed < 5


def test_acquiring_again_within_the_update_checks_ownership_only(state_dir: str) -> None:
    conn = Connection.local()
    claim.acquire(conn, "baseline", takeover=False, update_id="u1", state_dir=state_dir)

    assert claim.acquire(conn, "baseline", takeover=False, update_id="u1", state_dir=state_dir) is None
    current = claim.read(conn, state_dir=state_dir)

    assert current is not None and (current.stack, current.updating) == ("baseline", True)


def test_a_stack_that_lost_the_host_cannot_touch_the_claim(state_dir: str) -> None:
    conn = Connection.local()
    claim.acquire(conn, "baseline", takeover=False, state_dir=state_dir)
    claim.finish(conn, "baseline", state_dir=state_dir)
    claim.acquire(conn, "eagle3-bs128", takeover=True, state_dir=state_dir)

    with pytest.raises(ClaimError, match=r"'baseline' no longer owns .*stack 'eagle3-bs128' does now"):
        claim.record_server(conn, "baseline", 1, 1, state_dir=state_dir)
    assert claim.release(conn, "baseline", state_dir=state_dir) is False
    current = claim.read(conn, state_dir=state_dir)

    assert current is not None and current.stack == "eagle3-bs128"


def test_release_by_the_owner_leaves_no_claim_and_a_free_host(state_dir: str) -> None:
    conn = Connection.local()
    claim.acquire(conn, "baseline", takeover=False, state_dir=state_dir)

    assert claim.release(conn, "baseline", state_dir=state_dir) is True
    assert claim.read(conn, state_dir=state_dir) is None
    assert not (Path(state_dir) / "claim.json").exists()
    assert claim.acquire(conn, "eagle3-bs128", takeover=False, state_dir=state_dir) is None


def test_unreadable_claim_file_is_reported_with_the_fix(state_dir: str) -> None:
    Path(state_dir).mkdir()
    (Path(state_dir) / "claim.json").write_text("{not json")

    with pytest.raises(ClaimError, match=r"is not a claim.*remove the file"):
        claim.acquire(Connection.local(), "baseline", takeover=True, state_dir=state_dir)


RACER = """
import json, sys, time
from pathlib import Path
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.claim import acquire
from sglang_stacks.errors import ClaimError

task = json.loads(Path(sys.argv[1]).read_text())
try:
    acquire(Connection(**task["connection"]), task["stack"], takeover=True, state_dir=task["state_dir"])
except ClaimError as error:
    print(error)
    sys.exit(3)
Path(task["launched"]).write_text(task["stack"])  # what a server launch would be
time.sleep(1.5)  # the update goes on (model loading) while the other one arrives
"""


def processes_holding(path: Path) -> int:
    """How many processes on this machine have ``path`` open."""
    holders = 0
    for fd_folder in Path("/proc").glob("[0-9]*/fd"):
        try:
            holders += any(os.readlink(fd) == str(path) for fd in fd_folder.iterdir())
        except OSError:  # the process ended meanwhile, or is not ours to read
            continue
    return holders


@pytest.mark.parametrize("transport", ["ssh", "local"])
def test_two_updates_racing_for_one_host_one_wins_the_other_launches_nothing(
    sshd: SshServer, tmp_path: Path, state_dir: str, transport: str
) -> None:
    conn = sshd.connection() if transport == "ssh" else Connection.local()
    lock_path = Path(state_dir) / "claim.lock"
    lock_path.parent.mkdir()
    racers = {}
    # Holding the claim lock lines both updates up at it, so they reach the claim at one instant.
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stack in ("baseline", "eagle3-bs128"):
            racers[stack] = start_updater(conn, stack, state_dir, tmp_path, RACER)
        deadline = time.monotonic() + 30
        while processes_holding(lock_path) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes_holding(lock_path) == 3, "both updates should be waiting at the claim lock"
    outcomes = {
        stack: (process.wait(timeout=60), process.communicate()[0]) for stack, process in racers.items()
    }

    winners = [stack for stack, (code, _) in outcomes.items() if code == 0]
    losers = [stack for stack, (code, _) in outcomes.items() if code == 3]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert [p.name for p in tmp_path.glob("launched-*")] == [f"launched-{winners[0]}"]
    assert f"Stack '{winners[0]}' (update unnamed, since " in outcomes[losers[0]][1]
    assert f"this update of '{losers[0]}' stops here and launches nothing" in outcomes[losers[0]][1]
    holder = claim.read(conn, state_dir=state_dir)
    assert holder is not None and holder.stack == winners[0]


PULUMI_PROGRAM = """
import os
import time

import pulumi
import pulumi.dynamic as dynamic


class ClaimProvider(dynamic.ResourceProvider):
    def create(self, props):
        from sglang_stacks.hostops import claim
        from sglang_stacks.hostops.connection import Connection

        claim.acquire(Connection.local(), props["stack"], takeover=True, state_dir=props["state_dir"])
        return dynamic.CreateResult(props["stack"], props)


class ServerProvider(dynamic.ResourceProvider):
    def create(self, props):
        # "Loading" lasts until the test says so (a file appears): however slow the machine, the
        # racing update meets the claim while this one holds it.
        deadline = time.monotonic() + 300
        while props["loaded_when"] and not os.path.exists(props["loaded_when"]):
            if time.monotonic() > deadline:
                raise RuntimeError("the test never let the server load")
            time.sleep(0.1)
        if props["oom"]:
            raise RuntimeError("the server died: CUDA out of memory")
        return dynamic.CreateResult("server", props)


class GpuClaim(dynamic.Resource):
    def __init__(self, name, props, opts=None):
        super().__init__(ClaimProvider(), name, props, opts)


class Server(dynamic.Resource):
    def __init__(self, name, props, opts=None):
        super().__init__(ServerProvider(), name, props, opts)


config = pulumi.Config()
claimed = GpuClaim("claim", {"stack": pulumi.get_stack(), "state_dir": config.require("stateDir")})
Server(
    "server",
    {"loaded_when": config.get("loadedWhen") or "", "oom": config.require_bool("oom")},
    pulumi.ResourceOptions(depends_on=[claimed]),
)
"""


@pytest.mark.integration
def test_pulumi_updates_hold_the_host_while_they_run_and_a_failed_one_frees_it(tmp_path: Path) -> None:
    from tests._pulumi import pulumi_binary

    pulumi = pulumi_binary()
    project, host_state = tmp_path / "project", str(tmp_path / "host-state")
    (tmp_path / "backend").mkdir()
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        f"name: claim-check\nruntime:\n  name: python\n  options:\n    virtualenv: {REPO / '.venv'}\n"
    )
    (project / "__main__.py").write_text(PULUMI_PROGRAM)
    env = {
        **os.environ,
        "PULUMI_BACKEND_URL": f"file://{tmp_path / 'backend'}",
        "PULUMI_CONFIG_PASSPHRASE": "test",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PYTHONPATH": str(REPO),
    }

    def pulumi_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [pulumi, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )

    # The doomed update's server loads until the racing update is over, then runs out of memory.
    loaded = tmp_path / "loaded"
    for stack, oom in (("eagle3-bs128", "true"), ("baseline", "false")):
        pulumi_cli("stack", "init", stack)
        pulumi_cli("config", "set", "-s", stack, "stateDir", host_state)
        pulumi_cli("config", "set", "-s", stack, "oom", oom)
    pulumi_cli("config", "set", "-s", "eagle3-bs128", "loadedWhen", str(loaded))

    doomed = subprocess.Popen(
        [pulumi, "up", "--yes", "--skip-preview", "-s", "eagle3-bs128"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        holder = None
        while not (holder and holder.updating) and time.monotonic() < deadline and doomed.poll() is None:
            holder = claim.read(Connection.local(), state_dir=host_state)
            time.sleep(0.2)
        assert holder is not None and (holder.stack, holder.updating) == ("eagle3-bs128", True), (
            doomed.communicate()[0] if doomed.poll() is not None else ""
        )

        racing = pulumi_cli("up", "--yes", "--skip-preview", "-s", "baseline")
        loaded.touch()
        doomed_output = doomed.communicate(timeout=120)[0]
    finally:
        if doomed.poll() is None:
            doomed.kill()
    rollback = pulumi_cli("up", "--yes", "--skip-preview", "-s", "baseline")

    assert racing.returncode != 0, racing.stdout + "\n----\n" + doomed_output
    assert "Stack 'eagle3-bs128'" in racing.stdout and "launches nothing" in racing.stdout
    assert doomed.returncode != 0 and "CUDA out of memory" in doomed_output
    assert rollback.returncode == 0, rollback.stdout + rollback.stderr
    holder = claim.read(Connection.local(), state_dir=host_state)
    assert holder is not None and (holder.stack, holder.updating) == ("baseline", False)


def test_an_update_whose_pulumi_was_killed_lets_go_of_the_host(tmp_path: Path, state_dir: str) -> None:
    # The provider process (here: the updater) survives a killed Pulumi CLI (here: the shell that
    # started it, killed at once); reparented, it lets go of the host at its next heartbeat.
    conn = Connection.local()
    task = tmp_path / "orphan.json"
    task.write_text(
        json.dumps(
            {
                "connection": dataclasses.asdict(conn),
                "stack": "eagle3-bs128",
                "state_dir": state_dir,
                "launched": str(tmp_path / "launched-orphan"),
            }
        )
    )
    shell = subprocess.Popen(
        ["bash", "-c", f'{sys.executable} -c "$0" "$1" & echo $!; wait', UPDATER, str(task)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert shell.stdout is not None
    orphan = int(shell.stdout.readline())
    try:
        assert shell.stdout.readline() == "acquired\n"
        shell.kill()
        shell.wait()
        with pytest.raises(ClaimError, match="is updating"):
            claim.acquire(conn, "baseline", takeover=True, state_dir=state_dir)
        freed = None
        deadline = time.monotonic() + claim._HEARTBEAT_S + 10
        while freed is None and time.monotonic() < deadline:
            try:
                freed = claim.acquire(conn, "baseline", takeover=True, state_dir=state_dir)
            except ClaimError:
                time.sleep(0.5)
        assert freed is not None and freed.stack == "eagle3-bs128"
    finally:
        os.kill(orphan, 9)


# -- the GpuClaim resource's provider ---------------------------------------------------------


def claim_props(state_dir: str, stack: str, **changes: object) -> dict[str, object]:
    """The props GpuClaim gives its provider (numbers as Pulumi hands them over: floats)."""
    props: dict[str, object] = {
        "connection": {"kind": "local"},
        "stack": stack,
        "update_id": "u1",
        "nvidia_smi": ["true"],  # lists no process: GPU memory is free at once
        "state_dir": state_dir,
        "takeover": True,
        "stop_timeout_s": 10.0,
        "owner": None,
        "taken_from": None,
    }
    return {**props, **changes}


def test_state_of_the_previous_version_validates() -> None:
    from sglang_stacks.components.host import ClaimInputs, ClaimOutputs

    old = {
        **claim_props("~/.sglang-stacks", "baseline"),
        "connection": {"kind": "ssh", "host": "gpu-1", "port": 22.0, "user": "root", "host_key": None},
        "nvidia_smi": ["nvidia-smi"],
        "stop_timeout_s": 120.0,
        "owner": "baseline",
        "taken_from": "",
    }
    inputs, outputs = ClaimInputs.model_validate(old), ClaimOutputs.model_validate(old)
    assert inputs.connection.port == 22 and isinstance(inputs.connection.port, int)
    assert (inputs.nvidia_smi, outputs.owner, outputs.taken_from) == (("nvidia-smi",), "baseline", "")
    # Registered props: the outputs are None until created; the inputs validate alone.
    assert ClaimInputs.model_validate(claim_props("/s", "baseline")).stop_timeout_s == 10.0


def test_claim_diff_ignores_the_update_id_and_takes_back_a_lost_claim(state_dir: str) -> None:
    from sglang_stacks.components.host import ClaimProvider

    olds = {**claim_props(state_dir, "baseline"), "owner": "baseline", "taken_from": ""}
    provider = ClaimProvider()
    assert not provider.diff("baseline", olds, claim_props(state_dir, "baseline", update_id="u2")).changes
    lost = provider.diff("baseline", {**olds, "owner": "eagle3"}, claim_props(state_dir, "baseline"))
    assert lost.changes and not lost.replaces
    moved = {"kind": "ssh", "host": "gpu-2", "port": 22, "user": "root"}
    assert provider.diff("baseline", olds, claim_props(state_dir, "baseline", connection=moved)).replaces == [
        "connection"
    ]
    assert provider.diff("baseline", olds, claim_props(state_dir, "baseline", takeover=False)).changes


def test_takeover_stops_the_previous_owners_server_and_refresh_sees_the_owner(
    state_dir: str, tmp_path: Path
) -> None:
    from sglang_stacks.components.host import ClaimProvider

    conn = Connection.local()
    server = subprocess.Popen(["setsid", "sleep", "300"])
    try:
        time.sleep(0.2)
        start_ticks = int(Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        claim.acquire(conn, "baseline", takeover=False, update_id="u1", state_dir=state_dir)
        claim.record_server(conn, "baseline", server.pid, start_ticks, state_dir=state_dir)
        # It became ready: the host notes that it serves.
        serving.record(
            conn, state_dir, serving.ServingNote(stack="baseline", pid=server.pid, release="0.5.8", flags={})
        )
        claim.finish(conn, "baseline", state_dir=state_dir)
        provider = ClaimProvider()

        created = provider.create(claim_props(state_dir, "eagle3-bs128"))
        outs = created.outs or {}

        assert created.id == "eagle3-bs128"
        assert (outs["owner"], outs["taken_from"]) == ("eagle3-bs128", "baseline")
        assert server.wait(timeout=10) is not None  # stopped: TERM to its process group
        assert serving.read(conn, state_dir, release="0.5.8") is None
        claim.finish(conn, "eagle3-bs128", state_dir=state_dir)
        claim.acquire(conn, "baseline", takeover=True, update_id="u3", state_dir=state_dir)
        assert (provider.read("eagle3-bs128", outs).outs or {})["owner"] == "baseline"
    finally:
        server.kill()
        server.wait()


def test_a_takeover_from_a_server_that_never_became_ready_names_nothing_to_restore(state_dir: str) -> None:
    from sglang_stacks.components.host import ClaimProvider

    conn = Connection.local()
    # The previous stack's launch failed: its claim records a server that never served.
    server = subprocess.Popen(["setsid", "sleep", "300"])
    try:
        time.sleep(0.2)
        start_ticks = int(Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        claim.acquire(conn, "baseline", takeover=False, update_id="u1", state_dir=state_dir)
        claim.record_server(conn, "baseline", server.pid, start_ticks, state_dir=state_dir)
        claim.finish(conn, "baseline", state_dir=state_dir)

        created = ClaimProvider().create(claim_props(state_dir, "eagle3-bs128"))

        assert ((created.outs or {})["owner"], (created.outs or {})["taken_from"]) == ("eagle3-bs128", "")
        assert server.wait(timeout=10) is not None  # stopped all the same
    finally:
        server.kill()
        server.wait()
