"""The regression gate against a real history file, and the hand-back through a stand-in `pulumi`
program on PATH (the whole path through the real Pulumi CLI is in test_campaign)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from statistics import mean, stdev

import pytest

from sglang_stacks.errors import BenchmarkError
from sglang_stacks.results import gate, history
from sglang_stacks.results.stats import BenchmarkResult

BASELINE_RUNS = (89.4, 89.6, 89.5)
EAGLE3_RUNS = (54.0, 54.2, 54.1)


def result(runs: tuple[float, ...], *, output_len: int = 512) -> BenchmarkResult:
    average, spread = mean(runs), stdev(runs)
    return BenchmarkResult(
        concurrency=1,
        input_len=1024,
        output_len=output_len,
        repetitions=len(runs),
        tok_s_mean=average,
        tok_s_stdev=spread,
        tok_s_ci95=(average - spread, average + spread),
        tok_s_runs=runs,
        ttft_ms=None,
        tpot_ms=None,
        itl_ms=None,
        accept_length=None,
        requests=len(runs),
        errors=0,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "history.sqlite"
    history.record(
        path, "baseline", "digest", "0.5.8", "python -m sglang.launch_server", result(BASELINE_RUNS)
    )
    return path


@pytest.fixture
def fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `pulumi` first on PATH that records its arguments and folder, and exits $FAKE_PULUMI_EXIT."""
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "pulumi"
    program.write_text(
        "#!/bin/sh\n"
        'echo "$PWD $*" >> "$FAKE_PULUMI_LOG"\n'
        'echo "error: the baseline server did not start"\n'
        'exit "${FAKE_PULUMI_EXIT:-0}"\n'
    )
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "pulumi-calls.log"
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PULUMI_LOG", str(log))
    return log


def test_a_result_within_the_tolerance_passes(db: Path) -> None:
    gate.check(
        "baseline-bs512", result((86.0, 86.2, 86.1)), {"baseline_stack": "baseline", "tolerance_pct": 5}, db
    )


def test_a_regression_fails_with_both_numbers(db: Path, fake_pulumi: Path) -> None:
    with pytest.raises(BenchmarkError) as raised:
        gate.check(
            "eagle3-bs128",
            result(EAGLE3_RUNS),
            {"baseline_stack": "baseline", "tolerance_pct": 5, "on_regression": "fail"},
            db,
        )

    message = str(raised.value)
    assert "eagle3-bs128 ran at 54.1 tok/s, 39.6 % slower than baseline's 89.5 tok/s" in message
    assert "beyond the 5 % tolerance" in message
    assert "`pulumi up -s baseline`" in message
    assert not fake_pulumi.exists()  # failing alone deploys nothing


def test_hand_back_deploys_the_baseline_before_failing(
    db: Path, fake_pulumi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BenchmarkError, match=r"handed back: baseline is serving again"):
        gate.check(
            "eagle3-bs128",
            result(EAGLE3_RUNS),
            {"baseline_stack": "baseline", "tolerance_pct": 5, "on_regression": "hand_back"},
            db,
        )

    (call,) = fake_pulumi.read_text().splitlines()
    folder, *args = call.split()
    assert Path(folder) == tmp_path  # from the project folder the update runs in
    assert args[:1] == ["up"] and "--yes" in args and args[-2:] == ["-s", "baseline"]


def test_a_failed_hand_back_says_so_with_the_output(
    db: Path, fake_pulumi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PULUMI_EXIT", "255")

    with pytest.raises(BenchmarkError) as raised:
        gate.check(
            "eagle3-bs128",
            result(EAGLE3_RUNS),
            {"baseline_stack": "baseline", "tolerance_pct": 5, "on_regression": "hand_back"},
            db,
        )

    message = str(raised.value)
    assert "Handing the host back to baseline failed (exit 255)" in message
    assert "the baseline server did not start" in message
    assert message.endswith("Run `pulumi up -s baseline` yourself.")


def test_a_baseline_never_benchmarked_is_named(db: Path) -> None:
    with pytest.raises(BenchmarkError, match=r"baseline-bs128, which has no recorded benchmark yet"):
        gate.check(
            "eagle3-bs128", result(EAGLE3_RUNS), {"baseline_stack": "baseline-bs128", "tolerance_pct": 5}, db
        )


def test_only_a_baseline_result_with_the_same_workload_counts(db: Path) -> None:
    # A later baseline run with a shorter output would pass eagle3; the comparable one fails it.
    history.record(
        db,
        "baseline",
        "digest",
        "0.5.8",
        "python -m sglang.launch_server",
        result((50.0, 50.1, 50.2), output_len=64),
    )

    with pytest.raises(BenchmarkError, match=r"than baseline's 89\.5 tok/s"):
        gate.check(
            "eagle3-bs128", result(EAGLE3_RUNS), {"baseline_stack": "baseline", "tolerance_pct": 5}, db
        )


def test_a_baseline_with_another_workload_is_not_compared(db: Path) -> None:
    with pytest.raises(BenchmarkError) as raised:
        gate.check(
            "eagle3-bs128",
            result(EAGLE3_RUNS, output_len=64),
            {"baseline_stack": "baseline", "tolerance_pct": 5},
            db,
        )

    message = str(raised.value)
    assert "baseline was benchmarked with input_len 1024, output_len 512 at concurrency 1" in message
    assert "eagle3-bs128 with input_len 1024, output_len 64 at concurrency 1" in message
    assert "same sglang-stacks:benchmark workload" in message
