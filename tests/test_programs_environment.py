"""The environment's host programs (env_check.sh, env_install.sh) run here against a stand-in venv
whose python records its arguments: what they ask pip for, what they swap in, what they report."""

from __future__ import annotations

from pathlib import Path

from sglang_stacks.hostops import environment as hostenv
from sglang_stacks.hostops.transport import Connection
from tests._programs import run_sh

STAND_IN_PYTHON = """#!/bin/bash
# A venv's python: logs its arguments; pip fails for a pin named 'missing==1'.
echo "$*" >>"$(dirname "$0")/../calls.log"
case "$*" in
    *missing==1*) echo "ERROR: No matching distribution found for missing==1"; exit 1 ;;
    "-m pip install"*) echo "Successfully installed" ;;
    *sysconfig*) echo "$(dirname "$0")/../site" ;;
    *sglang_emulator*--version*) echo "sglang-emulator $SGLANG_EMULATOR_RELEASE" ;;
    *"import sglang"*) echo "ModuleNotFoundError: No module named 'sglang'" >&2; exit 1 ;;
esac
"""


def stand_in_venv(folder: Path) -> Path:
    (folder / "bin").mkdir(parents=True)
    (folder / "site").mkdir()
    python = folder / "bin" / "python"
    python.write_text(STAND_IN_PYTHON)
    python.chmod(0o755)
    return folder


def check(venv: Path | str, runtime: str = "emulator") -> dict[str, str]:
    done = run_sh("env_check.sh", venv=str(venv), runtime=runtime, release="0.5.8", marker=".marker")
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def install(venv: Path, pins: str, staging: str = "") -> tuple[int, str]:
    done = run_sh(
        "env_install.sh",
        venv=str(venv),
        pins=pins,
        staging=staging,
        packages="pkg_a\npkg_b",
        marker=".marker",
        fingerprint="f" * 64,
        install_log="install.log",
        lock_wait_s="5",
    )
    return done.returncode, done.stderr


def test_check_reports_an_absent_environment(tmp_path: Path) -> None:
    assert check(tmp_path / "none") == {"state": "absent"}


def test_check_reports_the_folder_marker_and_version(tmp_path: Path) -> None:
    venv = stand_in_venv(tmp_path / "env")
    (venv / ".marker").write_text("abc")

    assert check(venv) == {"venv": str(venv), "fingerprint": "abc", "version": "sglang-emulator 0.5.8"}
    assert "No module named 'sglang'" in check(venv, runtime="sglang")["version_error"]


def test_an_environment_under_the_home_folder_is_found_there(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    stand_in_venv(tmp_path / "home" / "envs" / "e")
    found = hostenv.read(Connection.local(), "~/envs/e", "emulator", "0.5.8")
    assert found is not None and found.venv_path == str(tmp_path / "home" / "envs" / "e")


def test_install_asks_pip_for_each_pin_swaps_packages_in_and_marks_it_done(tmp_path: Path) -> None:
    venv = stand_in_venv(tmp_path / "env")
    staging = tmp_path / "upload"
    for package in ("pkg_a", "pkg_b"):
        (staging / package).mkdir(parents=True)
        (staging / package / "__init__.py").write_text(f"NAME = {package!r}\n")
    (venv / "site" / "pkg_a").mkdir()
    (venv / "site" / "pkg_a" / "stale.py").write_text("")

    code, stderr = install(venv, "httpx==0.28.1\nsglang[all]==0.5.8", str(staging))

    assert code == 0, stderr
    calls = (venv / "calls.log").read_text().splitlines()
    assert (
        calls[0] == "-m pip install --no-input --disable-pip-version-check httpx==0.28.1 sglang[all]==0.5.8"
    )
    assert sorted(p.name for p in (venv / "site" / "pkg_a").iterdir()) == ["__init__.py"]
    assert (venv / "site" / "pkg_b" / "__init__.py").exists()
    assert not staging.exists()
    assert (venv / ".marker").read_text() == "f" * 64


def test_install_failing_pip_exits_11_with_pips_last_lines_and_no_marker(tmp_path: Path) -> None:
    venv = stand_in_venv(tmp_path / "env")
    (venv / ".marker").write_text("old")

    code, stderr = install(venv, "missing==1")

    assert code == 11
    assert "No matching distribution found for missing==1" in stderr
    assert not (venv / ".marker").exists()


def test_install_waits_for_the_lock_and_exits_12_when_it_stays_taken(tmp_path: Path) -> None:
    import fcntl

    venv = stand_in_venv(tmp_path / "env")
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = run_sh(
            "env_install.sh",
            venv=str(venv),
            pins="x==1",
            staging="",
            packages="",
            marker=".m",
            fingerprint="f",
            install_log="l",
            lock_wait_s="0.2",
        )
    assert done.returncode == 12
