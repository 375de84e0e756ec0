"""``sglang-stacks logs``: the server's log and the benchmark's progress on the host, shown once or
followed as they grow (on the local host, through the same transport an SSH host uses)."""

from __future__ import annotations

import json
import os
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


OLD, NEW = "0123456789ab", "ba9876543210"  # two launches' instances


def _stack_logs(tmp_path: Path) -> logs.StackLogs:
    (tmp_path / "logs").mkdir(exist_ok=True)
    return logs.StackLogs("demo", str(tmp_path / "logs"), str(tmp_path / "bench.progress.jsonl"))


def test_show_prints_the_newest_log_and_progress_as_sentences(tmp_path: Path) -> None:
    found = _stack_logs(tmp_path)
    old = Path(logs.server_log_path(found.log_dir, "demo", OLD))
    old.write_text("an earlier launch\n")
    os.utime(old, (time.time() - 60, time.time() - 60))
    Path(logs.server_log_path(found.log_dir, "demo", NEW)).write_text(
        "Load weight begin\nThe server is fired up and ready to roll!\n"
    )
    # Another stack whose name starts alike has logs of its own there.
    Path(logs.server_log_path(found.log_dir, "demo-two", "aaaaaaaaaaaa")).write_text("not demo's\n")
    Path(found.progress).write_text(json.dumps(STEP) + "\n")

    lines = logs.show(Connection.local(), found)

    assert "The server is fired up and ready to roll!" in lines
    assert (
        "benchmark: concurrency 16, measure 2/5: 12 requests, 812.5 tok/s so far, 1 error, "
        "last: HTTP 500: boom"
    ) in lines
    assert "an earlier launch" not in lines and "not demo's" not in lines


def test_a_phase_that_begins_and_the_end_read_as_such() -> None:
    begins = {**STEP, "requests_done": 0, "tok_s_so_far": 0.0, "errors": 0, "last_error": None}
    one = {**begins, "requests_done": 1, "tok_s_so_far": 80.1}

    assert logs.describe_progress(json.dumps(begins)) == "benchmark: concurrency 16, measure 2/5: starting"
    assert logs.describe_progress(json.dumps(one)) == (
        "benchmark: concurrency 16, measure 2/5: 1 request, 80.1 tok/s so far, 0 errors"
    )
    assert (
        logs.describe_progress(json.dumps({**begins, "phase": "done"})) == "benchmark: concurrency 16, done"
    )


def test_show_of_a_stack_never_launched_prints_nothing(tmp_path: Path) -> None:
    assert logs.show(Connection.local(), _stack_logs(tmp_path)) == []


def test_follow_prints_lines_written_after_it_started(tmp_path: Path) -> None:
    found = _stack_logs(tmp_path)  # no progress file yet: it is followed once it appears
    seen: list[str] = []

    def emit(line: str) -> None:
        seen.append(line)
        if len(seen) == 2:
            raise _Enough

    def write_later() -> None:
        time.sleep(0.5)
        with open(found.progress, "a") as handle:
            handle.write(json.dumps({**STEP, "repetition": 1}) + "\n")
            handle.write(json.dumps({**STEP, "repetition": 2}) + "\n")

    threading.Thread(target=write_later, daemon=True).start()
    with pytest.raises(_Enough):
        logs.follow(Connection.local(), found, emit)
    assert [line.split(":")[1] for line in seen] == [
        " concurrency 16, measure 1/5",
        " concurrency 16, measure 2/5",
    ]


def test_follow_started_before_a_launch_shows_the_new_server_from_its_first_line(tmp_path: Path) -> None:
    # `logs -f` started before `pulumi up`: the previous server's log is there, and the new launch
    # writes a new file, which is followed from its first line as soon as it appears.
    found = _stack_logs(tmp_path)
    old = Path(logs.server_log_path(found.log_dir, "demo", OLD))
    old.write_text("the previous server stopped\n")
    seen: list[str] = []

    def emit(line: str) -> None:
        seen.append(line)
        if line == "The server is fired up and ready to roll!":
            raise _Enough

    def launch_later() -> None:
        time.sleep(1.5)
        new = Path(logs.server_log_path(found.log_dir, "demo", NEW))
        new.write_text("server_args=ServerArgs(...)\n")
        time.sleep(1.5)
        with new.open("a") as handle:
            handle.write("The server is fired up and ready to roll!\n")

    threading.Thread(target=launch_later, daemon=True).start()
    with pytest.raises(_Enough):
        logs.follow(Connection.local(), found, emit)
    assert seen == [
        "the previous server stopped",
        "server_args=ServerArgs(...)",
        "The server is fired up and ready to roll!",
    ]


def test_the_cli_has_a_logs_command_that_follows() -> None:
    assert "logs" in COMMANDS and "follow" in COMMANDS["logs"].help
