"""The emulator as a prefill and a decode worker of a disaggregated fleet (``--disaggregation-mode``),
as SGLang's PD schedulers behave at the interfaces the router and the tool touch: a paired request
prefilled by one and decoded by the other, the KV's bytes taken over the profile's network, the
bootstrap server, and SGLang's refusals and timeouts in its own words."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_emulator.disaggregation import BootstrapServer, KvHandoff, transfer_s
from sglang_emulator.launch import parse_launch_flags, resolve_launch
from sglang_emulator.launcher import RunningEmulator, free_port, start_emulator
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.profile_loading import load_profile
from sglang_emulator.tokenizer import count_tokens
from sglang_stacks.errors import RouterError
from sglang_stacks.hostops import router_workers

BASE = ["--model", "/shared/kimi-k2.5-int4", "--tp", "8", "--trust-remote-code"]
BASE += ["--cuda-graph-max-bs", "128", "--disable-custom-all-reduce"]
TIMEOUT_S = 2
"""SGLang's bootstrap and waiting timeouts, shortened for the tests (300 s by default)."""


class Pair:
    def __init__(self, prefill: RunningEmulator, decode: RunningEmulator, bootstrap_port: int) -> None:
        self.prefill, self.decode, self.bootstrap_port = prefill, decode, bootstrap_port
        self._rooms = iter(range(1000, 10**6))

    def room(self) -> int:
        return next(self._rooms)

    def paired(self, room: int, port: int | None = None) -> dict[str, Any]:
        port = self.bootstrap_port if port is None else port
        return {"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": room}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    folder = tmp_path_factory.mktemp("pd")
    port = free_port()
    env = {
        "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": str(TIMEOUT_S),
        "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": str(TIMEOUT_S),
    }
    prefill_flags = [*BASE, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port)]
    with (
        start_emulator(prefill_flags, state_dir=str(folder / "p"), env=env, wait=True) as prefill,
        start_emulator(
            [*BASE, "--disaggregation-mode", "decode"], state_dir=str(folder / "d"), env=env, wait=True
        ) as decode,
    ):
        yield Pair(prefill, decode, port)


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/generate", json=body, timeout=60)


def _post_into(answers: list[httpx.Response], url: str, body: dict[str, Any]) -> None:
    answers.append(_post(url, body))


def _both(pair: Pair, prompt_words: int, max_new: int) -> tuple[httpx.Response, httpx.Response]:
    """One request sent to both workers with the same bootstrap room, as the router sends it."""
    body = {
        "text": "hello " * prompt_words,
        "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True},
        **pair.paired(pair.room()),
    }
    answers: dict[str, httpx.Response] = {}
    prefill = threading.Thread(target=lambda: answers.update(p=_post(pair.prefill.base_url, body)))
    prefill.start()
    answers["d"] = _post(pair.decode.base_url, body)
    prefill.join(timeout=60)
    return answers["p"], answers["d"]


def test_a_paired_request_is_prefilled_by_one_worker_and_decoded_by_the_other(pair: Pair) -> None:
    prefilled, decoded = _both(pair, 500, 16)

    assert prefilled.status_code == 200 and decoded.status_code == 200, (prefilled.text, decoded.text)
    # SGLang's prefill worker makes the first token only and ends with FINISH_LENGTH(length=0).
    assert prefilled.json()["meta_info"]["completion_tokens"] == 1
    assert prefilled.json()["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    assert decoded.json()["meta_info"]["completion_tokens"] == 16
    assert decoded.json()["meta_info"]["prompt_tokens"] == prefilled.json()["meta_info"]["prompt_tokens"]
    # The prefill worker logs its batches with the PD queues; the decode worker forms no prefill batch.
    assert "#prealloc-req: 0, #inflight-req:" in pair.prefill.log()
    assert "Prefill batch" not in pair.decode.log().split("fired up and ready to roll")[-1]


def test_the_kv_a_decode_worker_pulls_grows_with_the_prompt_and_takes_the_networks_time(pair: Pair) -> None:
    sizes = {}
    for words in (200, 400):
        room = pair.room()
        body = {"text": "hello " * words, "sampling_params": {"max_new_tokens": 4}, **pair.paired(room)}
        answers: list[httpx.Response] = []
        prefill = threading.Thread(target=_post_into, args=(answers, pair.prefill.base_url, body))
        prefill.start()
        kv = httpx.get(
            f"http://127.0.0.1:{pair.bootstrap_port}/kv?room={room}&timeout_s=30", timeout=40
        ).json()
        prefill.join(timeout=60)
        assert answers[0].status_code == 200
        sizes[kv["prompt_tokens"]] = kv["kv_bytes"]
    (short, short_bytes), (long, long_bytes) = sorted(sizes.items())
    assert long_bytes * short == short_bytes * long  # bytes per token: the KV cell over every rank
    info = httpx.get(f"{pair.prefill.base_url}/server_info", timeout=10).json()
    assert short_bytes / short > 0 and info["tp_size"] == 8
    # On the profile's 400 Gb/s link, a few milliseconds plus one hop.
    assert 20e-6 < transfer_s(long_bytes, 400.0, 20.0) < 0.5


def test_the_bootstrap_server_answers_its_health_and_the_prefill_layout_as_sglang_does(pair: Pair) -> None:
    base = f"http://127.0.0.1:{pair.bootstrap_port}"
    assert httpx.get(f"{base}/health", timeout=10).status_code == 200
    layout = httpx.get(f"{base}/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1", timeout=10)
    # 0.5.8's CommonKVBootstrapServer: the keys its decode worker reads.
    assert layout.json() == {
        "prefill_attn_tp_size": 8,
        "prefill_dp_size": 1,
        "prefill_pp_size": 1,
        "prefill_page_size": 1,
    }
    missing = httpx.get(f"{base}/route", timeout=10)
    assert (missing.status_code, missing.text) == (400, "Missing inputs for bootstrap server.")


def test_a_prefill_worker_with_another_page_size_fails_the_decode_handshake_in_sglangs_words(
    pair: Pair,
) -> None:
    # A prefill worker's bootstrap server that registered page size 16 (the decode worker has 1).
    port = free_port()
    layout = {"prefill_attn_tp_size": 8, "prefill_dp_size": 1, "prefill_pp_size": 1, "prefill_page_size": 16}
    server = BootstrapServer(("127.0.0.1", port), layout, KvHandoff())
    server.serve_in_background()
    try:
        body = {"text": "hello", "sampling_params": {"max_new_tokens": 4}, **pair.paired(pair.room(), port)}
        answer = _post(pair.decode.base_url, body)
    finally:
        server.shutdown()
    assert answer.status_code == 500
    message = answer.json()["message"]
    assert message.startswith("Decode handshake failed for request rank=0")
    assert message.endswith(
        "Page size mismatch: prefill server has page_size=16, but decode server has page_size=1. "
        "Both servers must use the same --page-size value."
    )


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_a_request_the_router_did_not_pair_is_refused_with_sglangs_words(pair: Pair, role: str) -> None:
    worker = pair.prefill if role == "prefill" else pair.decode
    answer = _post(worker.base_url, {"text": "hello", "sampling_params": {"max_new_tokens": 4}})
    assert answer.status_code == 400
    assert answer.json()["message"].startswith(
        "Invalid request: Disaggregated request received without boostrap room id. req.rid="
    )


def test_an_unreachable_bootstrap_server_fails_the_decode_handshake(pair: Pair) -> None:
    nowhere = free_port()
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 4}, **pair.paired(pair.room(), nowhere)}
    answer = _post(pair.decode.base_url, body)
    assert answer.status_code == 500
    message = answer.json()["message"]
    assert message.startswith("Decode handshake failed for request rank=0 decode_req.req.rid=")
    assert message.endswith(f"Could not fetch prefill parallel info from bootstrap_addr: 127.0.0.1:{nowhere}")
    assert message in pair.decode.log()


def test_kv_that_never_comes_times_out_on_the_decode_worker(pair: Pair) -> None:
    room = pair.room()  # never prefilled
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 4}, **pair.paired(room)}
    answer = _post(pair.decode.base_url, body)
    assert answer.status_code == 500
    assert answer.json()["message"].endswith(
        f"KVTransferError(bootstrap_room={room}): Request {room} timed out after {TIMEOUT_S:.1f}s in "
        "KVPoll.WaitingForInput"
    )
    assert answer.json()["message"].startswith("Decode transfer failed for request rank=0")


def test_a_prefill_whose_decode_worker_never_comes_times_out_bootstrapping(pair: Pair) -> None:
    room = pair.room()
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 4}, **pair.paired(room)}
    answer = _post(pair.prefill.base_url, body)
    assert answer.status_code == 500
    assert answer.json()["message"].startswith("Prefill bootstrap failed for request rank=0 req.rid=")
    assert answer.json()["message"].endswith(
        f"Request {room} timed out after {TIMEOUT_S:.1f}s in KVPoll.Bootstrapping"
    )


def test_a_worker_registered_in_the_other_role_is_refused_before_the_router_pairs_it(pair: Pair) -> None:
    wrong = router_workers.Registration(url=pair.decode.base_url, worker_type="prefill", bootstrap_port=1)
    with pytest.raises(RouterError) as caught:
        router_workers.add("http://127.0.0.1:9", wrong, 5)  # refused before the router is asked
    assert f"The server at {pair.decode.base_url} runs as a decode worker (--disaggregation-mode decode)" in (
        str(caught.value)
    )
    assert "registers it as a prefill worker" in str(caught.value)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (
            ["--disaggregation-mode", "prefill", "--disaggregation-decode-tp", "3"],
            "AssertionError: Different tp size is supported only when one tp is multiple of the other. "
            "decode_tp=3, prefill_tp=8",
        ),
        (
            ["--disaggregation-mode", "decode", "--disaggregation-decode-tp", "4"],
            "AssertionError: Cannot set --disaggregation-decode-tp for the decode engine.",
        ),
    ],
)
def test_role_flags_sglang_refuses_stop_the_launch_with_its_assertion(
    tmp_path: Path, flags: list[str], says: str
) -> None:
    with start_emulator([*BASE, *flags], state_dir=str(tmp_path)) as refused:
        assert refused.process.wait(timeout=60) != 0
        assert says in refused.log()


def _model(argv: list[str]) -> PerformanceModel:
    """The emulator's performance model of a 0.5.8 server launched with ``argv``."""
    profile = load_profile()
    return PerformanceModel(resolve_launch("0.5.8", parse_launch_flags("0.5.8", argv), profile), profile)


def test_a_decode_worker_decodes_from_when_the_kv_arrived_not_from_when_the_request_did(pair: Pair) -> None:
    # Its engine once timed the first steps from the request's arrival, before the prefill and the
    # transfer: the first tokens after the KV came in one burst, and the decode looked faster.
    new_tokens = 24
    body = {
        "text": "hello " * 1500,  # a long prefill on the other worker: time the decode worker waits
        "stream": True,
        "sampling_params": {"max_new_tokens": new_tokens, "ignore_eos": True},
        **pair.paired(pair.room()),
    }
    arrivals: list[float] = []
    prefill = threading.Thread(target=_post_into, args=([], pair.prefill.base_url, {**body, "stream": False}))
    sent = time.monotonic()
    prefill.start()
    with httpx.stream("POST", f"{pair.decode.base_url}/generate", json=body, timeout=60) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: {"):
                arrivals.append(time.monotonic())
    prefill.join(timeout=60)
    assert len(arrivals) == new_tokens
    model = _model([*BASE, "--disaggregation-mode", "decode"])
    step_ms, prefill_ms = model.decode_step_ms(1), model.prefill_ms(count_tokens(body["text"]))
    # The last token comes a prefill and the decode's steps after the request at the earliest
    # (about 520 ms); timed from the request, the steps ran during the prefill and the last came
    # about 270 ms after it. Measured from the send, a loaded machine only adds: a late first
    # token read by this client, which a span from that token would take for a burst, cannot.
    assert (arrivals[-1] - sent) * 1000 >= 0.97 * (prefill_ms + (new_tokens - 1) * step_ms)
