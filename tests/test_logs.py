"""``sglang-stacks logs``: the server's log and the benchmark's progress on the host, shown once or
followed as they grow (on the local host, through the same transport an SSH host uses)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from sglang_stacks.cli import COMMANDS
from sglang_stacks.hostops import logs
from sglang_stacks.hostops.connection import Connection

STEP = {
    "time_unix_s": 1.0, "level": "concurrency 16", "phase": "measure", "repetition": 2, "of": 5,
    "requests_done": 12, "tok_s_so_far": 812.5, "errors": 1, "last_error": "HTTP 500: boom",
}  # fmt: skip


class _Enough(Exception):
    pass


def test_show_prints_the_log_and_progress_as_sentences(tmp_path: Path) -> None:
    server_log = tmp_path / "server.log"
    server_log.write_text("Load weight begin\nThe server is fired up and ready to roll!\n")
    progress = tmp_path / "bench.progress.jsonl"
    progress.write_text(json.dumps(STEP) + "\n")
    lines = logs.show(Connection.local(), [str(server_log), str(progress), str(tmp_path / "absent")])
    assert "The server is fired up and ready to roll!" in lines
    assert (
        "benchmark: concurrency 16, measure 2/5: 12 requests, 812.5 tok/s so far, 1 errors, "
        "last: HTTP 500: boom"
    ) in lines
    assert not any("absent" in line for line in lines)


def test_follow_prints_lines_written_after_it_started(tmp_path: Path) -> None:
    progress = tmp_path / "bench.progress.jsonl"  # not there yet: tail -F waits for it
    seen: list[str] = []

    def emit(line: str) -> None:
        seen.append(line)
        if len(seen) == 2:
            raise _Enough

    def write_later() -> None:
        time.sleep(0.5)
        with progress.open("a") as handle:
            handle.write(json.dumps({**STEP, "repetition": 1}) + "\n")
            handle.write(json.dumps({**STEP, "repetition": 2}) + "\n")

    threading.Thread(target=write_later, daemon=True).start()
    with pytest.raises(_Enough):
        logs.follow(Connection.local(), [str(progress)], emit)
    assert [line.split(":")[1] for line in seen] == [
        " concurrency 16, measure 1/5",
        " concurrency 16, measure 2/5",
    ]


def test_the_cli_has_a_logs_command_that_follows() -> None:
    assert "logs" in COMMANDS and "follow" in COMMANDS["logs"].help
