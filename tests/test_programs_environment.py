"""The environment's host programs (env_check.sh, env_install.sh) run here against a stand-in venv
whose python records its arguments: what they ask pip for, what they swap in, what they report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sglang_stacks.hostops import environment as hostenv
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import source
from tests._programs import run_sh

STAND_IN_PYTHON = """#!/bin/bash
# A venv's python: logs its arguments; pip fails for a pin named 'missing==1'.
echo "$*" >>"$(dirname "$0")/../calls.log"
case "$*" in
    *missing==1*) echo "ERROR: No matching distribution found for missing==1"; exit 1 ;;
    "-m pip install"*) echo "Successfully installed" ;;
    *sysconfig*) echo "$(dirname "$0")/../site" ;;
    *sglang_emulator*--version*) echo "sglang-emulator $SGLANG_EMULATOR_RELEASE" ;;
    *"metadata.distribution"*) echo "sglang 0.5.8" ;;
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


def check(venv: Path | str, runtime: str = "emulator", prove_import: bool = False) -> dict[str, str]:
    done = run_sh(
        "env_check.sh",
        venv=str(venv),
        runtime=runtime,
        release="0.5.8",
        marker=".marker",
        installed_check=source("sglang_installed.py"),
        prove_import="1" if prove_import else "",
    )
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
    # SGLang's version: its metadata on a refresh; an install imports it too and reports that.
    assert check(venv, runtime="sglang")["version"] == "sglang 0.5.8"
    assert "No module named 'sglang'" in check(venv, runtime="sglang", prove_import=True)["version_error"]


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


def installed_check(site: Path) -> tuple[int, str, str]:
    """sglang_installed.py run by this machine's python with ``site`` first on its path."""
    done = subprocess.run(
        [sys.executable, "-c", source("sglang_installed.py")],
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout.strip(), done.stderr.strip()


def stand_in_site(folder: Path, requires: list[str], installed: list[str]) -> Path:
    """A site folder holding an sglang 0.5.8 that raises when imported, declaring ``requires``,
    and the distributions ``installed``."""
    (folder / "sglang").mkdir(parents=True)
    (folder / "sglang" / "__init__.py").write_text("raise RuntimeError('sglang was imported')\n")
    lines = [
        "Metadata-Version: 2.1",
        "Name: sglang",
        "Version: 0.5.8",
        *(f"Requires-Dist: {r}" for r in requires),
    ]
    (folder / "sglang-0.5.8.dist-info").mkdir()
    (folder / "sglang-0.5.8.dist-info" / "METADATA").write_text("\n".join(lines) + "\n")
    for name in installed:
        info = folder / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    return folder


def test_the_installed_check_reads_sglangs_version_from_metadata_without_importing_it(tmp_path: Path) -> None:
    site = stand_in_site(
        tmp_path, ["stand-in-dep-a", "Stand_In.Dep-B (>=1)"], ["stand_in_dep_a", "stand_in_dep_b"]
    )
    assert installed_check(site) == (0, "0.5.8", "")


def test_the_installed_check_names_missing_requirements_and_skips_conditional_ones(tmp_path: Path) -> None:
    requires = [
        "stand-in-dep-a",
        "stand-in-dep-b>=2",
        "stand-in-dep-c; extra == 'test'",
        "stand-in-dep-d; sys_platform == 'win32'",
    ]
    code, out, err = installed_check(stand_in_site(tmp_path, requires, ["stand_in_dep_a"]))
    assert (code, out) == (1, "")
    assert err == "sglang 0.5.8 requires stand-in-dep-b, not installed"


def test_the_installed_check_notices_a_package_removed_under_its_metadata(tmp_path: Path) -> None:
    site = stand_in_site(tmp_path, [], [])
    shutil.rmtree(site / "sglang")
    code, _, err = installed_check(site)
    assert code == 1 and err == "sglang 0.5.8 is recorded as installed, but its package is missing"
