"""tests/cluster_files.py: a test run builds the local cluster's programs only when it uses them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster_files import selects_cluster_files

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["tests"],
        ["tests/test_kube_fleet.py"],
        ["tests/test_local_cluster.py::test_a_pod_runs"],
        ["-x", "tests/test_spec.py", "tests/test_kube_deploy.py"],
        # The whole suite, filtered or with a plugin: an option's value is no path (these two
        # built no cluster before, and the cluster's tests then failed at setup).
        ["-k", "deploy"],
        ["-p", "some_plugin", "--junitxml", "report.xml"],
    ],
)
def test_the_whole_suite_or_a_cluster_file_needs_the_cluster(args: list[str]) -> None:
    assert selects_cluster_files(args)


@pytest.mark.parametrize(
    "args",
    [
        ["tests/test_spec.py"],
        ["tests/test_spec.py::test_a_stack_reads", "-k", "kube"],
        ["tests/faults"],
        ["-n", "2", "tests/test_deployment.py", "tests/test_claim.py"],
    ],
)
def test_other_files_run_without_building_the_cluster(args: list[str]) -> None:
    assert not selects_cluster_files(args)


def test_scripts_test_sh_asks_the_module_from_the_project_root() -> None:
    """The exit code is what scripts/test.sh branches on."""
    asked = [sys.executable, "-m", "tests.cluster_files"]
    assert subprocess.run([*asked, "tests/test_spec.py"], cwd=ROOT).returncode == 1
    assert subprocess.run([*asked, "tests/test_kube_fleet.py"], cwd=ROOT).returncode == 0
    assert "tests.cluster_files" in (ROOT / "scripts" / "test.sh").read_text()
