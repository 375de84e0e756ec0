"""The environment's host programs (env_check.sh, env_install.sh) run here against a stand-in venv
whose python records its arguments: what they ask pip for, what they swap in, what they report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
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


def install(
    venv: Path, pins: str, staging: str = "", fingerprint: str = "f" * 64, **more: str
) -> tuple[int, str]:
    done = run_sh(
        "env_install.sh",
        venv=str(venv),
        pins=pins,
        staging=staging,
        packages="pkg_a\npkg_b",
        marker=".marker",
        fingerprint=fingerprint,
        install_log="install.log",
        lock_wait_s="5",
        **more,
    )
    return done.returncode, done.stderr


def stand_in_wheel(folder: Path) -> Path:
    """A wheel of one module, ``standin_pkg``: a pin pip installs without an index."""
    path = folder / "standin_pkg-1.0-py3-none-any.whl"
    info = "standin_pkg-1.0.dist-info"
    files = {
        "standin_pkg/__init__.py": "VERSION = '1.0'\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: standin-pkg\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]))
    return path


def venv_has_pip(venv: Path) -> bool:
    return (
        subprocess.run([str(venv / "bin" / "python"), "-c", "import pip"], capture_output=True).returncode
        == 0
    )


def test_an_emulator_venv_is_made_without_pip_and_filled_by_the_hosts_pip(tmp_path: Path) -> None:
    """``python3 -m venv`` spends about 4 CPU-seconds on ensurepip, for every emulated host's venv: with
    WITHOUT_PIP the venv is made without it and the host python3's pip (``--python``) installs."""
    venv = tmp_path / "env"
    code, stderr = install(venv, str(stand_in_wheel(tmp_path / "wheels")), without_pip="1")
    assert code == 0, stderr
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-c", "import standin_pkg"], capture_output=True).returncode == 0
    assert not venv_has_pip(venv)
    assert (venv / ".marker").read_text() == "f" * 64


def test_a_venv_without_pip_gets_its_own_when_the_hosts_python3_has_none(tmp_path: Path) -> None:
    """Made without pip, then the host's python3 lost its pip (or never had one recent enough):
    the venv gets pip of its own (ensurepip) and installs with it."""
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "python3").write_text(
        f'#!/bin/bash\ncase "$*" in *"import sys, pip"*) exit 1 ;; esac\nexec {sys.executable} "$@"\n'
    )
    (shim / "python3").chmod(0o755)
    wheel = stand_in_wheel(tmp_path / "wheels")
    code, stderr = install(venv, str(wheel), without_pip="1", path=f"{shim}:{os.environ['PATH']}")
    assert code == 0, stderr
    assert venv_has_pip(venv)
    assert subprocess.run([str(venv / "bin" / "python"), "-c", "import standin_pkg"]).returncode == 0


def local_index(folder: Path, wheel: Path) -> str:
    """A package index of one project on disk (PEP 503's simple layout), as pip reads PyPI's."""
    (folder / "standin-pkg").mkdir(parents=True)
    (folder / "standin-pkg" / "index.html").write_text(f'<a href="{wheel.as_uri()}">{wheel.name}</a>')
    return folder.as_uri()


def test_an_emulator_venv_takes_its_pins_from_the_kept_wheels_and_the_index_fills_them(
    tmp_path: Path,
) -> None:
    """Each emulated host has a venv of its own; reading the package index was most of pip's 4.4
    CPU-seconds per venv. The first install fills the machine's wheel folder from the index, the next
    one installs from it alone: here the index is gone by then."""
    index = local_index(tmp_path / "index", stand_in_wheel(tmp_path / "published"))
    wheels = tmp_path / "kept"
    first = install(
        tmp_path / "one", "standin-pkg==1.0", without_pip="1", wheels=str(wheels), pip_index_url=index
    )
    assert first[0] == 0, first[1]
    assert [path.name for path in wheels.iterdir()] == ["standin_pkg-1.0-py3-none-any.whl"]
    shutil.rmtree(tmp_path / "index")
    shutil.rmtree(tmp_path / "published")

    second = install(
        tmp_path / "two", "standin-pkg==1.0", without_pip="1", wheels=str(wheels), pip_index_url=index
    )

    assert second[0] == 0, second[1]
    for venv in ("one", "two"):
        python = str(tmp_path / venv / "bin" / "python")
        assert subprocess.run([python, "-c", "import standin_pkg"], capture_output=True).returncode == 0
    # A pin the folder lacks and the index cannot give fails as it always did, with pip's words.
    code, stderr = install(tmp_path / "three", "missing==1", wheels=str(wheels), pip_index_url=index)
    assert code == 11 and "No matching distribution found for missing==1" in stderr


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
    assert "-m pip install --no-input --disable-pip-version-check httpx==0.28.1 sglang[all]==0.5.8" in calls
    assert sorted(p.name for p in (venv / "site" / "pkg_a").iterdir()) == ["__init__.py"]
    assert (venv / "site" / "pkg_b" / "__init__.py").exists()
    assert not staging.exists()
    assert (venv / ".marker").read_text() == "f" * 64


def test_a_reinstall_never_leaves_a_moment_without_the_package(tmp_path: Path) -> None:
    """Emulated hosts of one machine share an environment, and another stack's server or version
    check may read a package's files while an install swaps a new version in. After every rename the
    install makes (a stand-in ``mv`` checks), the package's file is there: the old or the new one.
    The folder used to be renamed aside before the new one came in, and a version check met the gap."""
    venv = stand_in_venv(tmp_path / "env")
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "mv").write_text(
        f'#!/bin/bash\n{shutil.which("mv")} "$@" || exit\n'
        f"{{ cat {venv}/site/pkg_a/data.txt 2>/dev/null || echo gone; }} >>{tmp_path}/seen.log\n"
    )
    (shim / "mv").chmod(0o755)
    for version in ("old", "new", "newer"):
        staging = tmp_path / f"upload-{version}"
        for package in ("pkg_a", "pkg_b"):
            (staging / package).mkdir(parents=True)
            (staging / package / "data.txt").write_text(f"{version}\n")
        code, stderr = install(
            venv, "httpx==0.28.1", str(staging), version * 8, path=f"{shim}:{os.environ['PATH']}"
        )
        assert code == 0, stderr

    seen = (tmp_path / "seen.log").read_text().splitlines()
    assert "gone" not in seen[seen.index("old") :], seen  # once first installed, never missing
    assert (venv / "site" / "pkg_a" / "data.txt").read_text() == "newer\n"
    # Only the current version's folder is left beside the links.
    assert sorted(path.name for path in (venv / "site").iterdir() if "pkg_a" in path.name) == sorted(
        ["pkg_a", os.readlink(venv / "site" / "pkg_a")]
    )


def staged(folder: Path, version: str) -> str:
    for package in ("pkg_a", "pkg_b"):
        (folder / package).mkdir(parents=True)
        (folder / package / "data.txt").write_text(f"{version}\n")
    return str(folder)


def test_an_install_another_update_finished_while_it_waited_changes_nothing(tmp_path: Path) -> None:
    """Two updates found one environment unfinished and asked for the same install; the second
    waited for the first's lock. It then finds the marker written and does nothing: installing again
    swapped the packages under the server the first update had just started, and removed the version
    that server was reading (a suite run met it: "No such file ... .sglang_emulator.arcjKZ/profiles").
    An install asked for over that very marker (a repair) still runs."""
    venv = stand_in_venv(tmp_path / "env")
    code, stderr = install(venv, "httpx==0.28.1", staged(tmp_path / "first", "first"), seen="")
    assert code == 0, stderr
    serving = os.readlink(venv / "site" / "pkg_a")
    installs = (venv / "calls.log").read_text().count(" install ")

    code, stderr = install(venv, "httpx==0.28.1", staged(tmp_path / "second", "second"), seen="")

    assert code == 0, stderr
    assert os.readlink(venv / "site" / "pkg_a") == serving
    assert (venv / "site" / serving / "data.txt").read_text() == "first\n"
    assert (venv / "calls.log").read_text().count(" install ") == installs
    assert not (tmp_path / "second").exists()  # the upload is removed all the same

    code, stderr = install(venv, "httpx==0.28.1", staged(tmp_path / "repair", "repair"), seen="f" * 64)
    assert code == 0, stderr
    assert (venv / "site" / "pkg_a" / "data.txt").read_text() == "repair\n"


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
