"""Injected faults, each observed from outside the process as a user would see it."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from sglang_emulator.faults import FaultError, load_faults
from sglang_emulator.launcher import start_emulator

BASE = ["--model", "/shared/kimi-k2.5-int4", "--tp", "8"]
GENERATE = {"text": "x", "sampling_params": {"max_new_tokens": 2}}


def faults_env(**faults: object) -> dict[str, str]:
    return {"SGLANG_EMULATOR_FAULTS": json.dumps(faults)}


def test_crash_after_requests_kills_the_server_and_frees_the_gpus(tmp_path: Path) -> None:
    with start_emulator(BASE, state_dir=str(tmp_path), env=faults_env(crash_after_requests=2)) as server:
        assert server.wait_ready(30), server.log()
        assert list(tmp_path.glob("*.json"))
        assert httpx.post(server.base_url + "/generate", json=GENERATE).status_code == 200
        httpx.post(server.base_url + "/generate", json=GENERATE)
        assert server.process.wait(timeout=10) == -9
        assert "injected fault: crash_after_requests=2" in server.log()
        assert list(tmp_path.glob("*.json")) == []


def test_crash_after_seconds(tmp_path: Path) -> None:
    # Long enough after ready that a health check sees it up on a loaded machine, then it dies.
    with start_emulator(BASE, state_dir=str(tmp_path), env=faults_env(crash_after_s=2)) as server:
        assert server.wait_ready(30), server.log()
        assert server.process.wait(timeout=10) == -9
        assert "Received sigquit from a child process" in server.log()


def test_crash_at_request_drops_that_request_unanswered(tmp_path: Path) -> None:
    with start_emulator(BASE, state_dir=str(tmp_path), env=faults_env(crash_at_request=2)) as server:
        assert server.wait_ready(30), server.log()
        assert httpx.post(server.base_url + "/generate", json=GENERATE).status_code == 200
        assert server.process.poll() is None, "it crashed before the request it was told to"
        with pytest.raises(httpx.TransportError):
            httpx.post(server.base_url + "/generate", json=GENERATE)
        assert server.process.wait(timeout=10) == -9
        log = server.log()
        assert "NCCL communicator was aborted" in log and "injected fault: crash_at_request=2" in log
        assert list(tmp_path.glob("*.json")) == []


def test_crash_after_zero_seconds_comes_with_the_ready_line(tmp_path: Path) -> None:
    # The ready line is logged, and the crash follows it before any health check answers 200.
    with start_emulator(BASE, state_dir=str(tmp_path), env=faults_env(crash_after_s=0), wait=False) as server:
        answers, deadline = [], time.monotonic() + 60
        while server.process.poll() is None and time.monotonic() < deadline:
            try:
                answers.append(httpx.get(server.base_url + "/health", timeout=5).status_code)
            except httpx.TransportError:
                time.sleep(0.01)
        assert server.process.returncode == -9 and 200 not in answers, answers
        log = server.log()
        assert log.index("The server is fired up and ready to roll!") < log.index("NCCL communicator")


def test_hang_during_startup_stays_alive_and_silent(tmp_path: Path) -> None:
    env = faults_env(hang_at_phase="cuda_graph")
    with start_emulator(BASE, state_dir=str(tmp_path), env=env, wait=False) as server:
        # Reaching the phase takes longer on a loaded machine; the hang is judged after it is reached.
        deadline = time.monotonic() + 30
        while "Capture cuda graph begin" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)  # far longer than the capture phase lasts at the emulator's time scale
        assert server.process.poll() is None
        log = server.log()
        assert "Capture cuda graph begin" in log and "Capture cuda graph end" not in log
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.base_url + "/health")


def test_hang_after_requests_stops_every_generation_with_the_process_alive(tmp_path: Path) -> None:
    env = {**faults_env(hang_after_requests=2), "SGLANG_HEALTH_CHECK_TIMEOUT": "1"}
    long = {"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 2000}}
    # What must answer has ten seconds to, on a loaded machine too; what hangs is given up on sooner.
    silent = httpx.Timeout(10, read=3)
    with (
        start_emulator(BASE, state_dir=str(tmp_path), env=env) as server,
        httpx.Client(base_url=server.base_url, timeout=10) as client,
    ):
        assert server.wait_ready(30), server.log()
        assert client.post("/generate", json=GENERATE).status_code == 200
        with client.stream("POST", "/generate", json=long, timeout=silent) as streaming:
            lines = streaming.iter_lines()
            assert next(lines).startswith("data: ")
            # The second request to finish stops the scheduler: the one in flight streams no more.
            assert client.post("/generate", json=GENERATE).status_code == 200
            with pytest.raises(httpx.ReadTimeout):
                for line in lines:
                    assert line != "data: [DONE]"
        with pytest.raises(httpx.ReadTimeout):
            client.post("/generate", json=GENERATE, timeout=httpx.Timeout(10, read=1))

        # Alive, listening, and failing its health check the way SGLang does: after its timeout.
        assert server.process.poll() is None
        started = time.monotonic()
        assert client.get("/health_generate", timeout=10).status_code == 503
        assert time.monotonic() - started >= 1
        assert client.get("/health", timeout=10).status_code == 503
        log = server.log()
        assert "sglang-emulator injected fault: hang_after_requests=2" in log
        assert "couldn't get a response from detokenizer for last 1 seconds" in log


def test_error_burst_fails_a_run_of_requests_then_recovers(tmp_path: Path) -> None:
    env = faults_env(error_burst={"after_requests": 1, "count": 2, "status": 503})
    with start_emulator(BASE, state_dir=str(tmp_path), env=env) as server:
        assert server.wait_ready(30)
        codes = [httpx.post(server.base_url + "/generate", json=GENERATE).status_code for _ in range(4)]
        assert codes == [200, 503, 503, 200]


def test_port_in_use_fault_fails_like_uvicorn(tmp_path: Path) -> None:
    server = start_emulator(BASE, state_dir=str(tmp_path), env=faults_env(port_in_use=True), wait=False)
    assert server.process.wait(timeout=30) == 1
    assert (
        f"error while attempting to bind on address ('127.0.0.1', {server.port}): address already in use"
        in (server.log())
    )
    server.stop()


def test_a_port_really_in_use_fails_the_same_way(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        server = start_emulator(BASE, port=port, state_dir=str(tmp_path), wait=False)
        assert server.process.wait(timeout=30) == 1
        assert "[Errno 98] error while attempting to bind" in server.log()
        server.stop()


def test_fault_spec_errors_name_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_EMULATOR_FAULTS", '{"crash_after": 3}')
    with pytest.raises(FaultError, match="Unknown fault 'crash_after'; allowed: crash_after_requests"):
        load_faults({})
    monkeypatch.setenv("SGLANG_EMULATOR_FAULTS", '{"hang_at_phase": "later"}')
    with pytest.raises(FaultError, match="allowed: init, weights"):
        load_faults({})
    monkeypatch.setenv("SGLANG_EMULATOR_FAULTS", '{"hang_after_requests": 0}')
    with pytest.raises(FaultError, match="Fault 'hang_after_requests' must be >= 1, got 0"):
        load_faults({})
    monkeypatch.setenv("SGLANG_EMULATOR_FAULTS", '{"crash_after_requests": 2}')
    assert load_faults({"crash_after_requests": 9, "slow_readiness_s": 1}).crash_after_requests == 2


def test_memory_another_process_holds_is_missing_from_the_kv_pool(tmp_path: Path) -> None:
    # 0.80 leaves the INT4 Kimi a pool of about 2.9 GB per GPU. SGLang takes the fraction of what was
    # free at init, so 1 GiB held elsewhere shrinks the pool by 0.80 GiB; 4 GiB leaves none, and
    # SGLang stops with its own message.
    flags = [*BASE, "--mem-fraction-static", "0.80", "--disable-custom-all-reduce"]
    pools = []
    for held in (0, 1024):
        env = faults_env(gpu_memory_held_mib=held)
        with start_emulator(flags, state_dir=str(tmp_path), env=env) as server:
            assert server.wait_ready(30), server.log()
            line = next(x for x in server.log().splitlines() if "KV Cache is allocated" in x)
            pools.append(float(line.split("KV size: ")[1].split(" GB")[0]))
    assert pools[0] - pools[1] == pytest.approx(0.80, abs=0.015)
    server = start_emulator(
        flags, state_dir=str(tmp_path), env=faults_env(gpu_memory_held_mib=4096), wait=False
    )
    assert server.process.wait(timeout=30) == 1
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in server.log()
    server.stop()
