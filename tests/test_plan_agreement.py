"""benchmarks/plan_agreement.py, run small: preflight's memory plan and the emulator agree on every
candidate of a random sample (the plan's fits is a server that starts, prefills a full chunk and
serves its benchmark; its does-not-fit is a server that fails in the phase the plan names)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("agreement") / "rows.json"
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/plan_agreement.py",
            "--candidates",
            "40",
            "--seed",
            "7",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode in (0, 1), done.stderr
    loaded: dict[str, Any] = json.loads(out.read_text())
    return loaded


def test_the_plan_and_the_emulator_agree_on_every_judged_candidate(report: dict[str, Any]) -> None:
    summary = report["summary"]
    assert summary["candidates"] == 40
    assert summary["disagreements"] == [], summary["disagreements"][:3]
    assert summary["agreements"] == summary["judged"] > 0


def test_the_sample_reaches_fitting_and_failing_launches(report: dict[str, Any]) -> None:
    # Not a sample of easy cases: some serve, some fail, and the failures are of several phases.
    outcomes = report["summary"]["emulator_outcomes"]
    assert outcomes.get("served", 0) > 0
    assert len([phase for phase in outcomes if phase != "served"]) >= 2, outcomes
