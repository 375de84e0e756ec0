"""The emulator's HTTP API over real HTTP: every route, both streaming formats, honesty."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from sglang_emulator.launcher import RunningEmulator, start_emulator
from sglang_loadgen import client, contract

BASE_FLAGS = ["--model", "/shared/kimi-k2.5-int4", "--tp", "8", "--trust-remote-code"]
EAGLE_FLAGS = [
    "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/data/eagle3",
    "--speculative-num-steps", "2", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "4",
]  # fmt: skip


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    flags = [*BASE_FLAGS, "--cuda-graph-max-bs", "128", "--disable-custom-all-reduce", "--enable-metrics"]
    state = str(tmp_path_factory.mktemp("state"))
    with start_emulator(flags, state_dir=state) as server:
        assert server.wait_ready(30), server.log()
        yield server


@pytest.fixture(scope="module")
def eagle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    flags = [*BASE_FLAGS, "--cuda-graph-max-bs", "128", "--disable-custom-all-reduce",
             "--mem-fraction-static", "0.88", *EAGLE_FLAGS]  # fmt: skip
    state = str(tmp_path_factory.mktemp("state"))
    with start_emulator(flags, state_dir=state) as server:
        assert server.wait_ready(30), server.log()
        yield server


def sse_payloads(text: str) -> list[str]:
    events = [e for e in text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), events
    return [e.removeprefix("data: ") for e in events]


def test_health_and_info_routes_answer_after_ready(baseline: RunningEmulator) -> None:
    with httpx.Client(base_url=baseline.base_url) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/health_generate").status_code == 200
        for path in ("/model_info", "/get_model_info"):
            info = client.get(path).json()
            assert info["model_path"] == "/shared/kimi-k2.5-int4"
            assert info["is_generation"] is True
        for path in ("/server_info", "/get_server_info"):
            info = client.get(path).json()
            assert info["version"] == "0.5.8"
            assert info["tp_size"] == 8
            assert info["cuda_graph_max_bs"] == 128
            assert info["disable_custom_all_reduce"] is True
            # SGLang 0.5.8's own choice at max bs 128, lowered for Kimi-K2.5's vision tower.
            assert info["mem_fraction_static"] == pytest.approx(0.7787, abs=1e-4)
            assert "last_gen_throughput" in info["internal_states"][0]
            assert info["emulator"]["name"] == "sglang-emulator"
            assert "no GPU is used" in info["emulator"]["note"]
        models = client.get("/v1/models").json()
        assert models["data"][0]["id"] == "/shared/kimi-k2.5-int4"
        assert client.get("/no_such_route").status_code == 404


def test_generate_non_streaming_reports_meta_info(baseline: RunningEmulator) -> None:
    body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}}
    reply = httpx.post(baseline.base_url + "/generate", json=body).json()
    meta = reply["meta_info"]
    assert meta["completion_tokens"] == 12 == len(reply["output_ids"])
    assert meta["prompt_tokens"] == 7  # "The", " cap", "ital", " of", " Fran", "ce", " is"
    assert meta["finish_reason"] == {"type": "length", "length": 12}
    assert meta["e2e_latency"] > 0
    assert "spec_verify_ct" not in meta
    assert len(reply["text"].split()) == 12


def test_generate_streams_cumulative_sse_and_done(baseline: RunningEmulator) -> None:
    body = {"text": "a b c d", "sampling_params": {"max_new_tokens": 6}, "stream": True}
    with httpx.stream("POST", baseline.base_url + "/generate", json=body) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        payloads = sse_payloads(reply.read().decode())
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4, 5, 6]
    assert chunks[2]["text"].startswith(chunks[1]["text"])
    assert len(chunks[-1]["output_ids"]) == 6
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert "e2e_latency" in chunks[-1]["meta_info"]
    assert all(
        "e2e_latency" not in c["meta_info"] and c["meta_info"]["finish_reason"] is None for c in chunks[:-1]
    )


def test_prefix_cache_reports_cached_tokens_and_flush_clears_it(baseline: RunningEmulator) -> None:
    prompt = " ".join(["the"] * 40)
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 1}}
    with httpx.Client(base_url=baseline.base_url) as client:
        client.post("/generate", json=body)
        assert client.post("/generate", json=body).json()["meta_info"]["cached_tokens"] == 39
        assert client.post("/flush_cache").status_code == 200
        assert client.post("/generate", json=body).json()["meta_info"]["cached_tokens"] == 0


def test_flush_cache_is_refused_while_a_request_runs(baseline: RunningEmulator) -> None:
    # The request would stream for minutes, so it runs until this client drops it: it is running
    # when the flush arrives however late a loaded machine sends it, and keeps streaming after.
    body = {"text": "busy", "sampling_params": {"max_new_tokens": 20_000}, "stream": True}
    with httpx.stream("POST", baseline.base_url + "/generate", json=body) as reply:
        chunks = (json.loads(line.removeprefix("data: ")) for line in reply.iter_lines() if line)
        first = next(chunks)["meta_info"]["completion_tokens"]
        refused = httpx.post(baseline.base_url + "/flush_cache")
        assert refused.status_code == 400 and "requests are running" in refused.text
        assert next(chunks)["meta_info"]["completion_tokens"] > first
    # Dropping the stream aborts the request, as SGLang does; once idle, the same flush succeeds.
    deadline = time.monotonic() + 30
    while (status := httpx.post(baseline.base_url + "/flush_cache").status_code) != 200:
        assert status == 400 and time.monotonic() < deadline, status
        time.sleep(0.05)


def test_completions_stream_deltas_and_usage(baseline: RunningEmulator) -> None:
    body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 5, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    with httpx.stream("POST", baseline.base_url + "/v1/completions", json=body) as reply:
        payloads = sse_payloads(reply.read().decode())
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 5
    deltas = [c["choices"][0]["text"] for c in chunks[:-1]]
    assert len(deltas) == 5 and all(d.startswith(" ") for d in deltas)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[0]["object"] == "text_completion"


def test_completions_non_streaming(baseline: RunningEmulator) -> None:
    reply = httpx.post(baseline.base_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 3}).json()
    assert reply["object"] == "text_completion"
    assert reply["usage"]["completion_tokens"] == 3
    assert reply["choices"][0]["finish_reason"] == "length"


def test_chat_completions_stream_role_then_content(baseline: RunningEmulator) -> None:
    body = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    with httpx.stream("POST", baseline.base_url + "/v1/chat/completions", json=body) as reply:
        payloads = sse_payloads(reply.read().decode())
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["object"] == "chat.completion.chunk"
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1])
    assert len(content.split()) == 4
    assert chunks[-1]["usage"]["completion_tokens"] == 4
    plain = httpx.post(baseline.base_url + "/v1/chat/completions", json={**body, "stream": False}).json()
    assert plain["choices"][0]["message"]["role"] == "assistant"
    assert plain["usage"]["completion_tokens"] == 4


def test_bad_requests_get_400_with_the_fix(baseline: RunningEmulator) -> None:
    with httpx.Client(base_url=baseline.base_url) as client:
        reply = client.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": -1}})
        assert reply.status_code == 400 and "max_new_tokens" in reply.json()["message"]
        assert client.post("/generate", content=b"{not json").status_code == 400
        assert client.post("/v1/chat/completions", json={"messages": []}).status_code == 400


def test_metrics_exposes_sglang_names(baseline: RunningEmulator) -> None:
    httpx.post(baseline.base_url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2}})
    text = httpx.get(baseline.base_url + "/metrics").text
    for name in ("sglang:gen_throughput", "sglang:num_running_reqs", "sglang:spec_accept_length",
                 "sglang:time_to_first_token_seconds_bucket", "sglang:generation_tokens_total"):  # fmt: skip
        assert name in text
    assert "# TYPE sglang:time_to_first_token_seconds histogram" in text


def test_sixty_four_concurrent_streams_all_complete(baseline: RunningEmulator) -> None:
    body = {"text": "go", "sampling_params": {"max_new_tokens": 20}, "stream": True}

    def one(_: int) -> int:
        with httpx.stream("POST", baseline.base_url + "/generate", json=body, timeout=60) as reply:
            last = sse_payloads(reply.read().decode())[-2]
        return int(json.loads(last)["meta_info"]["completion_tokens"])

    with ThreadPoolExecutor(64) as pool:
        assert list(pool.map(one, range(64))) == [20] * 64


def test_speculative_decoding_emits_chunks_of_accepted_tokens(eagle: RunningEmulator) -> None:
    body = {"text": "draft me", "sampling_params": {"max_new_tokens": 60}, "stream": True}
    with httpx.stream("POST", eagle.base_url + "/generate", json=body) as reply:
        chunks = [json.loads(p) for p in sse_payloads(reply.read().decode())[:-1]]
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    steps = {b - a for a, b in itertools.pairwise(counts)}
    assert steps <= {1, 2, 3} and len(steps) > 1
    meta = chunks[-1]["meta_info"]
    accept = meta["completion_tokens"] / meta["spec_verify_ct"]
    assert 1.6 < accept < 2.1
    info = httpx.get(eagle.base_url + "/server_info").json()
    assert info["max_running_requests"] == 48
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1.0


def test_decode_is_no_faster_than_the_model(eagle: RunningEmulator, baseline: RunningEmulator) -> None:
    # A lower bound only: emission may lag on a busy machine but must never outrun the model.
    body = {"text": "x", "sampling_params": {"max_new_tokens": 40}}
    reply = httpx.post(baseline.base_url + "/generate", json=body).json()
    assert reply["meta_info"]["e2e_latency"] >= 39 / 89.5 * 0.99


def test_api_key_guards_everything_but_health_and_metrics(tmp_path: Path) -> None:
    flags = [*BASE_FLAGS, "--api-key", "sesame", "--enable-metrics"]
    with start_emulator(flags, state_dir=str(tmp_path)) as server:
        assert server.wait_ready(30), server.log()
        assert httpx.get(server.base_url + "/health").status_code == 200
        assert httpx.get(server.base_url + "/metrics").status_code == 200
        assert httpx.get(server.base_url + "/v1/models").status_code == 401
        authorized = httpx.get(server.base_url + "/v1/models", headers={"Authorization": "Bearer sesame"})
        assert authorized.status_code == 200
        assert "sesame" not in json.dumps(httpx.get(server.base_url + "/server_info", headers={
            "Authorization": "Bearer sesame"}).json())  # fmt: skip


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    """The campaign's host at memory fraction 0.7713: a KV pool of 2,985 tokens."""
    flags = [*BASE_FLAGS, "--cuda-graph-max-bs", "128", "--disable-custom-all-reduce",
             "--mem-fraction-static", "0.7713", "--enable-metrics"]  # fmt: skip
    state = str(tmp_path_factory.mktemp("state"))
    with start_emulator(flags, state_dir=state) as server:
        assert server.wait_ready(30), server.log()
        yield server


def test_a_small_pool_queues_streams_it_cannot_hold_and_its_log_never_reads_above_one(
    small_pool: RunningEmulator,
) -> None:
    """16 streams of 256 + 64 tokens through the project's load generator: nine fit the pool at a
    time (SGLang's admission: prompt plus every output token reserved, 320 of 2,985 each), the
    others wait in the queue; every request is served whole and no log line says the pool holds
    more than it has."""
    workload = contract.Workload(
        url=small_pool.base_url, input_len=256, output_len=64, concurrency=(16,), warmup_requests=0,
        repetitions=1, requests_per_repetition=16,
    )  # fmt: skip
    (level,) = client.run(workload).levels
    assert level.errors == 0 and level.completion_tokens == 16 * 64
    log = small_pool.log()
    assert "max_total_num_tokens=2985" in log
    usages = [float(u) for u in re.findall(r"token usage: ([0-9.]+)", log)]
    assert usages and max(usages) <= 1.0
    assert max(int(n) for n in re.findall(r"#running-req: (\d+)", log)) <= 2985 // (256 + 64)
    assert max(int(n) for n in re.findall(r"#queue-req: (\d+)", log)) > 0
    metrics = httpx.get(small_pool.base_url + "/metrics").text
    assert "sglang:num_retracted_requests_total" in metrics and "sglang:new_token_ratio" in metrics


def test_a_prompt_longer_than_the_pool_allows_is_refused_as_sglang_refuses_it(
    small_pool: RunningEmulator,
) -> None:
    """A request holds at most the pool less one token (2,984 here), its prompt less than that less
    five: a longer prompt is refused, with 400 when it does not stream and an aborted chunk when it
    does, and a shorter one gets no more output than the pool leaves."""
    prompt = {"input_ids": [7] * 2979, "sampling_params": {"max_new_tokens": 10}}
    message = (
        "Input length (2979 tokens) exceeds the maximum allowed length (2979 tokens). Use a shorter input or "
        "enable --allow-auto-truncate."
    )
    with httpx.Client(base_url=small_pool.base_url, timeout=30) as http:
        refused = http.post("/generate", json=prompt)
        assert refused.status_code == 400 and refused.json()["message"] == message
        streamed = http.post("/generate", json={**prompt, "stream": True})
        assert streamed.status_code == 200
        first, done = sse_payloads(streamed.text)
        assert json.loads(first)["meta_info"]["finish_reason"] == {
            "type": "abort", "message": message, "status_code": 400
        }  # fmt: skip
        assert done == "[DONE]"
        # One token shorter is served, its output cut to what the request may hold after it.
        served = http.post("/generate", json={**prompt, "input_ids": [7] * 2978}).json()
        assert served["meta_info"]["completion_tokens"] == 2984 - 2978 - 1
