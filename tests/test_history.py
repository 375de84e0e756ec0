"""The results history: SQLite rows per benchmark, safe with two stacks writing at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from sglang_stacks.errors import SpecError
from sglang_stacks.results import history
from sglang_stacks.results.stats import BenchmarkResult, Percentiles

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def result(tok_s: float, accept: float | None = None) -> BenchmarkResult:
    return BenchmarkResult(
        concurrency=1,
        input_len=128,
        output_len=256,
        repetitions=5,
        tok_s_mean=tok_s,
        tok_s_stdev=0.4,
        tok_s_ci95=(tok_s - 0.5, tok_s + 0.5),
        tok_s_runs=(tok_s,) * 5,
        ttft_ms=Percentiles(p50=42.0, p90=45.0, p99=47.5),
        tpot_ms=Percentiles(p50=11.0, p90=11.2, p99=11.9),
        itl_ms=Percentiles(p50=11.0, p90=12.0, p99=14.0),
        accept_length=accept,
        requests=20,
        errors=0,
    )


def test_record_then_read_back_in_time_order(tmp_path: Path) -> None:
    db = tmp_path / "state" / "history.sqlite"
    argv = ["python", "-m", "sglang.launch_server", "--cuda-graph-max-bs", "128"]
    history.record(db, "eagle3-bs128", "e" * 64, "0.5.8", argv, result(54.1, 2.43), T0 + timedelta(hours=1))
    stored = history.record(
        db, "baseline", "b" * 64, "0.5.8", "python -m sglang.launch_server", result(89.5), T0
    )
    assert stored.id > 0
    found = history.rows(db)
    assert [row.stack for row in found] == ["baseline", "eagle3-bs128"]
    assert found[1].launch_command == "python -m sglang.launch_server --cuda-graph-max-bs 128"
    assert found[1].result == result(54.1, 2.43)
    assert found[0].recorded_at == T0
    assert [row.stack for row in history.rows(db, ["eagle3-bs128"])] == ["eagle3-bs128"]
    assert history.rows(db, []) == []


def test_latest_is_the_newest_result_of_that_stack(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    assert history.latest(db, "baseline") is None
    history.record(db, "baseline", "a", "0.5.8", "x", result(82.0), T0)
    history.record(db, "baseline", "b", "0.5.8", "x", result(89.5), T0 + timedelta(days=1))
    history.record(db, "eagle3-bs128", "c", "0.5.8", "x", result(54.1), T0 + timedelta(days=2))
    newest = history.latest(db, "baseline")
    assert newest is not None and newest.result.tok_s_mean == 89.5 and newest.flags_digest == "b"


def test_times_are_stored_in_utc_and_must_carry_a_zone(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    paris = timezone(timedelta(hours=1))
    history.record(
        db, "baseline", "a", "0.5.8", "x", result(89.5), datetime(2026, 11, 29, 10, 0, tzinfo=paris)
    )
    assert history.rows(db)[0].recorded_at == T0
    with pytest.raises(ValueError, match="has no timezone"):
        history.record(db, "baseline", "a", "0.5.8", "x", result(89.5), datetime(2026, 11, 29))


_WRITER = textwrap.dedent(
    """
    import sys, time
    from datetime import UTC, datetime
    from sglang_stacks.results import history
    from sglang_stacks.results.stats import BenchmarkResult
    db, stack, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    template = BenchmarkResult.model_validate_json(sys.stdin.read())
    while time.time() < start:
        time.sleep(0.001)
    for n in range(40):
        history.record(db, stack, f"digest-{n}", "0.5.8", "cmd", template, datetime.now(UTC))
    """
)


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    start = str(time.time() + 1.0)  # both begin writing at the same moment
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(db), stack, start],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for stack in ("baseline", "eagle3-bs128")
    ]
    for writer in writers:
        _, stderr = writer.communicate(result(70.0).model_dump_json(), timeout=60)
        assert writer.returncode == 0, stderr
    found = history.rows(db)
    assert len(found) == 80
    assert len({row.id for row in found}) == 80
    assert sum(row.stack == "baseline" for row in found) == 40


def test_default_path_sits_beside_the_local_state(tmp_path: Path) -> None:
    home = Path("~").expanduser()
    assert history.default_history_path(environ={}) == home / ".pulumi" / history.FILE_NAME
    backend = {"PULUMI_BACKEND_URL": f"file://{tmp_path}"}
    assert history.default_history_path(environ=backend) == tmp_path / ".pulumi" / history.FILE_NAME
    assert history.default_history_path("file://~", environ=backend) == home / ".pulumi" / history.FILE_NAME
    chosen = {history.ENV_VAR: str(tmp_path / "mine.sqlite"), **backend}
    assert history.default_history_path(environ=chosen) == tmp_path / "mine.sqlite"


def test_a_file_that_is_not_a_history_is_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "notes.sqlite"
    db.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(SpecError, match=r"cannot be read .* move this one aside"):
        history.rows(db)
