"""The ensure-*.sh scripts run side by side (scripts/test.sh starts the cluster's beside the
others): one whose `apt-get update` finds the package lists locked by another waits its turn
instead of failing the test command on a new machine."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests._pulumi import ROOT

# A stand-in apt-get: `update` fails as apt 2.6 does while another apt-get holds the lists' lock,
# as many times as the counter file says, then succeeds; `install` records its packages.
FAKE_APT = """#!/usr/bin/env bash
state={state}
if [[ " $* " == *" update "* ]]; then
    left=$(cat "$state/locked")
    if ((left > 0)); then
        echo $((left - 1)) >"$state/locked"
        echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 2038 (apt-get)" >&2
        echo "E: Unable to lock directory /var/lib/apt/lists/" >&2
        exit 100
    fi
    echo updated >>"$state/calls"
    exit 0
fi
if [[ " $* " == *" install "* ]]; then
    echo "install ${{*: -2}}" >>"$state/calls"
    exit 0
fi
echo "E: $1 was not expected" >&2
exit 100
"""


INSTALL = 'apt_install "OpenSSH" openssh-server openssh-client'


def _apt_install(tmp_path: Path, locked: int, other_error: bool = False) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "locked").write_text(f"{locked}\n")
    script = FAKE_APT.format(state=tmp_path)
    if other_error:
        script = script.replace("Could not get lock", "Failed to fetch")
    apt = bin_dir / "apt-get"
    apt.write_text(script)
    apt.chmod(apt.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", f". {ROOT / 'scripts/_apt.sh'} && {INSTALL}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_update_that_finds_the_lists_locked_waits_and_installs(tmp_path: Path) -> None:
    done = _apt_install(tmp_path, locked=2)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        "updated",
        "install openssh-server openssh-client",
    ]


def test_an_update_that_fails_otherwise_stops_with_apts_message(tmp_path: Path) -> None:
    done = _apt_install(tmp_path, locked=1, other_error=True)
    assert done.returncode != 0
    assert "Failed to fetch" in done.stderr
    assert not (tmp_path / "calls").exists()
