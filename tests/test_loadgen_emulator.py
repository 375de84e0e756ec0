"""The load generator against the emulator over HTTP: prompts of exactly the declared length on
every route, no prefix cache shared between runs, the progress a person can follow."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sglang_emulator.launcher import RunningEmulator, start_emulator
from sglang_loadgen import client, contract
from sglang_stacks.hostops.logs import describe_progress

FLAGS = ["--model", "/shared/kimi-k2.5-int4", "--tp", "8", "--trust-remote-code", "--enable-metrics"]
FLAGS += ["--cuda-graph-max-bs", "128", "--disable-custom-all-reduce"]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    state = str(tmp_path_factory.mktemp("state"))
    with start_emulator(FLAGS, state_dir=state) as server:
        assert server.wait_ready(30), server.log()
        yield server


def _workload(server: RunningEmulator, **changes: object) -> contract.Workload:
    settings: dict[str, object] = {
        "url": server.base_url,
        "input_len": 37,
        "output_len": 6,
        "concurrency": (4,),
        "warmup_requests": 1,
        "repetitions": 1,
        "requests_per_repetition": 4,
    }
    settings.update(changes)
    return contract.Workload(**settings)  # type: ignore[arg-type]


def _cached_tokens(server: RunningEmulator) -> float:
    text = httpx.get(server.base_url + "/metrics").text
    found = re.search(r"^sglang:cached_tokens_total\{[^}]*\} (\S+)$", text, re.MULTILINE)
    assert found, text
    return float(found.group(1))


@pytest.mark.parametrize("endpoint", ["generate", "completions", "chat"])
def test_prompts_are_exactly_input_len_server_tokens(emulator: RunningEmulator, endpoint: str) -> None:
    document = client.run(_workload(emulator, endpoint=endpoint))
    (level,) = document.levels
    assert level.errors == 0, level.error_samples
    # Every response's prompt_tokens was checked; the mean says so too.
    assert level.prompt_tokens_mean == 37
    assert level.completion_tokens == 4 * 6


def test_two_runs_on_one_server_send_disjoint_prompts(emulator: RunningEmulator) -> None:
    before = _cached_tokens(emulator)
    first = client.run(_workload(emulator, input_len=64))
    second = client.run(_workload(emulator, input_len=64))
    assert first.nonce != second.nonce
    # The same workload again: the prefix cache served none of the second run's prompts.
    assert _cached_tokens(emulator) == before
    # Asked for on purpose, half of each prompt is shared within the run: the cache serves it.
    client.run(_workload(emulator, input_len=64, prefix_share=0.5))
    assert _cached_tokens(emulator) - before >= 4 * 32


def test_progress_lines_say_the_level_the_repetition_and_tok_s(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    progress = tmp_path / "progress.jsonl"
    client.run(_workload(emulator, repetitions=2, progress_file=str(progress)))
    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    phases = [(line["phase"], line["repetition"], line["of"]) for line in lines]
    assert ("warmup", 0, 2) in phases and ("measure", 1, 2) in phases and ("measure", 2, 2) in phases
    done = [line for line in lines if line["phase"] == "measure" and line["requests_done"] == 4]
    assert done and all(line["tok_s_so_far"] > 0 and line["errors"] == 0 for line in done)
    sentence = describe_progress(json.dumps(done[-1]))
    assert sentence.startswith("benchmark: concurrency 4, measure 2/2: 4 requests, ")
    assert sentence.endswith("tok/s so far, 0 errors")


def test_tok_s_so_far_counts_the_tokens_of_a_request_still_streaming(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    # One request of 300 tokens (over 3 s at this server's speed) per repetition: a progress line
    # comes every 2 s, so one is written while the request is still streaming.
    progress = tmp_path / "progress.jsonl"
    workload = _workload(
        emulator, concurrency=(1,), output_len=300, requests_per_repetition=1, progress_file=str(progress)
    )
    client.run(workload)
    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    # The first line of a phase is its start; the ticks after it come while the request streams.
    measure = [line for line in lines if line["phase"] == "measure"]
    in_flight = [line for line in measure[1:] if line["requests_done"] == 0]
    assert in_flight, lines
    # Counting finished requests only, these read 0 tok/s while the server streamed at full speed.
    assert all(line["tok_s_so_far"] > 0 for line in in_flight), lines


def test_incremental_streaming_sends_only_new_text(tmp_path: Path) -> None:
    with start_emulator([*FLAGS, "--stream-output"], state_dir=str(tmp_path)) as server:
        assert server.wait_ready(30), server.log()
        body = {"input_ids": [1000 + i for i in range(10)], "sampling_params": {"max_new_tokens": 5}}
        with httpx.stream("POST", server.base_url + "/generate", json={**body, "stream": True}) as reply:
            events = [line[6:] for line in reply.iter_lines() if line.startswith("data: {")]
        chunks = [json.loads(event) for event in events]
        assert [len(chunk["output_ids"]) for chunk in chunks] == [1] * 5
        assert [chunk["meta_info"]["completion_tokens"] for chunk in chunks] == [1, 2, 3, 4, 5]
        assert all(len(chunk["text"].split()) == 1 for chunk in chunks)
        (level,) = client.run(_workload(server)).levels
        assert level.errors == 0 and level.completion_tokens == 24


def test_token_ids_outside_the_vocabulary_are_refused(emulator: RunningEmulator) -> None:
    body = {"input_ids": [5, 10**9], "sampling_params": {"max_new_tokens": 1}}
    reply = httpx.post(emulator.base_url + "/generate", json=body)
    assert reply.status_code == 400
    assert "Token id 1000000000 is outside the vocabulary" in reply.json()["message"]
