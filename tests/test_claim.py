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

from components import claim
from components._transport import Connection
from components.errors import ClaimError
from tests.sshd import SshServer, start_sshd

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    with start_sshd() as server:
        yield server


@pytest.fixture
def state_dir(tmp_path: Path) -> str:
    return str(tmp_path / "host-state")


def test_handover_from_an_idle_stack_returns_the_previous_owner(sshd: SshServer, state_dir: str) -> None:
    conn = sshd.connection()

    assert claim.acquire(conn, "baseline", takeover=False, update_id="u1", state_dir=state_dir) is None
    claim.record_server(conn, "baseline", 4242, state_dir=state_dir)
    claim.finish(conn, "baseline", state_dir=state_dir)
    with pytest.raises(ClaimError, match=r"belong to stack 'baseline'.*pulumi destroy -s baseline"):
        claim.acquire(conn, "eagle3-bs128", takeover=False, state_dir=state_dir)
    previous = claim.acquire(conn, "eagle3-bs128", takeover=True, update_id="u2", state_dir=state_dir)

    assert previous is not None
    assert (previous.stack, previous.server_pid, previous.updating_until) == ("baseline", 4242, None)
    current = claim.read(conn, state_dir=state_dir)
    assert current is not None
    assert (current.stack, current.update_id, current.server_pid) == ("eagle3-bs128", "u2", None)


def test_a_stack_that_lost_the_host_cannot_touch_the_claim(state_dir: str) -> None:
    conn = Connection.local()
    claim.acquire(conn, "baseline", takeover=False, state_dir=state_dir)
    claim.finish(conn, "baseline", state_dir=state_dir)
    claim.acquire(conn, "eagle3-bs128", takeover=True, state_dir=state_dir)

    with pytest.raises(ClaimError, match=r"'baseline' no longer owns .*stack 'eagle3-bs128' does now"):
        claim.record_server(conn, "baseline", 1, state_dir=state_dir)
    assert claim.release(conn, "baseline", state_dir=state_dir) is False
    current = claim.read(conn, state_dir=state_dir)

    assert current is not None and current.stack == "eagle3-bs128"


def test_release_by_the_owner_leaves_no_claim(state_dir: str) -> None:
    conn = Connection.local()
    claim.acquire(conn, "baseline", takeover=False, state_dir=state_dir)

    assert claim.release(conn, "baseline", state_dir=state_dir) is True
    assert claim.read(conn, state_dir=state_dir) is None
    assert not (Path(state_dir) / "claim.json").exists()


def test_running_update_is_never_taken_over_until_its_lease_runs_out(state_dir: str) -> None:
    conn = Connection.local()
    claim.acquire(conn, "baseline", takeover=False, update_id="u1", lease_s=2, state_dir=state_dir)

    with pytest.raises(ClaimError, match=r"'baseline' is updating the local host since .*update u1"):
        claim.acquire(conn, "eagle3-bs128", takeover=True, state_dir=state_dir)
    time.sleep(2.1)
    previous = claim.acquire(conn, "eagle3-bs128", takeover=True, state_dir=state_dir)

    assert previous is not None and previous.stack == "baseline"


def test_owner_acquiring_again_renews_its_lease(state_dir: str) -> None:
    conn = Connection.local()
    claim.acquire(conn, "baseline", takeover=False, update_id="u1", lease_s=60, state_dir=state_dir)
    first = claim.read(conn, state_dir=state_dir)

    assert (
        claim.acquire(conn, "baseline", takeover=False, update_id="u2", lease_s=600, state_dir=state_dir)
        is None
    )
    renewed = claim.read(conn, state_dir=state_dir)

    assert first is not None and renewed is not None
    assert renewed.update_id == "u2"
    assert renewed.claimed_at == first.claimed_at
    assert renewed.updating_until is not None and first.updating_until is not None
    assert renewed.updating_until > first.updating_until


def test_unreadable_claim_file_is_reported_with_the_fix(state_dir: str) -> None:
    Path(state_dir).mkdir()
    (Path(state_dir) / "claim.json").write_text("{not json")

    with pytest.raises(ClaimError, match=r"is not a claim.*remove the file"):
        claim.acquire(Connection.local(), "baseline", takeover=True, state_dir=state_dir)


RACER = """
import json, sys
from pathlib import Path
from components._transport import Connection
from components.claim import acquire
from components.errors import ClaimError

task = json.loads(Path(sys.argv[1]).read_text())
try:
    acquire(Connection(**task["connection"]), task["stack"], takeover=True, state_dir=task["state_dir"])
except ClaimError as error:
    print(error)
    sys.exit(3)
Path(task["launched"]).write_text(task["stack"])  # what a server launch would be
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
            task = tmp_path / f"{stack}.json"
            task.touch(mode=0o600)  # it holds the test key
            task.write_text(
                json.dumps(
                    {
                        "connection": dataclasses.asdict(conn),
                        "stack": stack,
                        "state_dir": state_dir,
                        "launched": str(tmp_path / f"launched-{stack}"),
                    }
                )
            )
            racers[stack] = subprocess.Popen(
                [sys.executable, "-c", RACER, str(task)],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=subprocess.PIPE,
                text=True,
            )
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
    assert f"Stack '{winners[0]}' is updating" in outcomes[losers[0]][1]
    assert f"this update of '{losers[0]}' stops here and launches nothing" in outcomes[losers[0]][1]
    holder = claim.read(conn, state_dir=state_dir)
    assert holder is not None and holder.stack == winners[0]
