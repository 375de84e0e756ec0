"""A benchmark's progress where a person watches a deployment: on ``pulumi up``'s own output,
through the engine (the benchmark's row says the level, the repetition and tok/s so far while it
runs, and the diagnostics at the end do not repeat it), and in ``sglang-stacks logs -f`` started
before the update, with the new server's log from its first line."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sglang_stacks.resources.engine_status import EngineStatus, engine_address
from tests._pulumi import Workspace, emulator_stack, free_port

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Deployed:
    up: subprocess.CompletedProcess[str]
    followed: list[str]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    tmp = tmp_path_factory.mktemp("status")
    workspace = Workspace.create(tmp)
    config = emulator_stack(port=free_port(), state_dir=tmp / "host")
    # Two repetitions of one request of 240 tokens: a few seconds each, so a progress line comes
    # while a request streams, besides the line each phase begins with.
    config = config.replace("output_len: 48", "output_len: 240").replace("repetitions: 3", "repetitions: 2")
    workspace.init_stack("watched", config)
    # Started before the update, as a person does in another terminal.
    follower = subprocess.Popen(
        workspace.cli_command("logs", "watched", "-f"),
        cwd=workspace.path,
        env=workspace.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    followed: list[str] = []
    reading = threading.Thread(
        target=lambda: followed.extend(line.rstrip("\n") for line in iter(follower.stdout.readline, "")),  # type: ignore[union-attr]
        daemon=True,
    )
    reading.start()
    try:
        up = workspace.run("up", "--yes", "--skip-preview", "-s", "watched")
    finally:
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=30)
        reading.join(timeout=10)
    yield Deployed(up, followed)
    workspace.run("destroy", "--yes", "--skip-preview", "-s", "watched", check=False)


def test_pulumi_up_shows_the_benchmarks_progress_on_its_row_while_it_runs(deployed: Deployed) -> None:
    output = deployed.up.stdout
    during, _, after = output.partition("Diagnostics:")
    row = r"Benchmark watched-benchmark creating \(\d+s\) benchmark: concurrency 1, "
    measured = re.findall(row + r"measure (\d)/2: (\d+) requests?, ([\d.]+) tok/s so far, 0 errors", during)

    assert {repetition for repetition, _, _ in measured} == {"1", "2"}, output
    # A line while the repetition's only request streams: no request done, tok/s counted already.
    assert any(done == "0" and float(tok_s) > 0 for _, done, tok_s in measured), output
    assert "tok/s so far" not in after  # shown while it ran, not repeated among the diagnostics


def test_logs_follow_started_before_the_update_shows_the_new_server_and_the_benchmark(
    deployed: Deployed,
) -> None:
    lines = deployed.followed

    assert "The server is fired up and ready to roll!" in " ".join(lines), lines
    benchmark = [line for line in lines if line.startswith("benchmark: concurrency 1, measure")]
    assert benchmark, lines
    assert lines.index(benchmark[0]) > next(i for i, line in enumerate(lines) if "fired up" in line)


def test_outside_a_provider_process_status_goes_nowhere() -> None:
    assert engine_address() is None
    status = EngineStatus("urn:pulumi:s::p::t::n")
    assert not status.active
    status.say("nothing hears this")  # and nothing fails
