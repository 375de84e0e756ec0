"""benchmarks/suite_cpu.py: a run of the suite with SGLANG_STACKS_TEST_CPU set says, file by file,
how many tests ran, their seconds and their CPU seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests._pulumi import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from suite_cpu import by_file, main


def test_a_run_with_the_report_on_is_summed_by_file(tmp_path: Path, capsys) -> None:
    prefix = tmp_path / "cpu"
    env = {**os.environ, "SGLANG_STACKS_TEST_CPU": str(prefix)}
    chosen = ["tests/test_cluster_files.py", "tests/test_imports.py"]
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *chosen],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stdout
    reports = sorted(tmp_path.glob("cpu-*.tsv"))
    assert len(reports) == 1  # one worker
    files = by_file(reports)
    passed = int(ran.stdout.strip().splitlines()[-1].split(" passed")[0].rsplit(" ", 1)[-1])
    assert set(files) == set(chosen) and sum(row[0] for row in files.values()) == passed
    # test_cluster_files starts a Python process per test of its last case: CPU is counted.
    assert all(seconds > 0 for _, seconds, _ in files.values()) and files[chosen[0]][2] > 0
    assert main([str(path) for path in reports]) == 0
    table = capsys.readouterr().out
    assert f"{passed} tests in 2 files" in table and "| tests/test_imports.py |" in table
