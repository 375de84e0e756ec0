"""Startup over a real process: SGLang's log lines in order, the OOM exit, the campaign's hard failures."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from sglang_emulator.launcher import RunningEmulator, start_emulator

BASE = ["--model", "/shared/kimi-k2.5-int4", "--tp", "8", "--trust-remote-code"]
EAGLE = [
    "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/data/eagle3",
    "--speculative-num-steps", "2", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "4",
]  # fmt: skip


def positions(log: str, needles: list[str]) -> list[int]:
    found = [log.find(n) for n in needles]
    assert -1 not in found, [n for n, p in zip(needles, found, strict=True) if p == -1]
    return found


def failed_start(tmp_path: Path, flags: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    server = start_emulator(flags, state_dir=str(tmp_path), env=env, wait=False)
    code = server.process.wait(timeout=30)
    log = server.log()
    server.stop()
    return code, log


def test_a_stopped_emulator_leaves_no_log_file_behind_and_keeps_its_text(tmp_path: Path) -> None:
    # A run of the suite left about 130 of these in the temp folder before.
    with start_emulator(BASE, state_dir=str(tmp_path)) as server:
        log_file = server.log_path
        assert log_file.is_file() and "The server is fired up and ready to roll!" in server.log()
    assert not log_file.exists()
    assert "The server is fired up and ready to roll!" in server.log()


def test_startup_logs_in_sglang_order_with_draft_capture(tmp_path: Path) -> None:
    flags = [*BASE, "--cuda-graph-max-bs", "128", "--mem-fraction-static", "0.88", *EAGLE]
    with start_emulator(flags, state_dir=str(tmp_path)) as server:
        assert server.wait_ready(30), server.log()
        log = server.log()
    order = positions(
        log,
        [
            "sglang-emulator: emulating SGLang 0.5.8 on profile rtx-pro-6000-x8-kimi-k2.5-int4",
            "server_args=ServerArgs(",
            "Load weight begin. avail mem=",
            "Load weight end. type=KimiK25ForConditionalGeneration",
            "KV Cache is allocated. #tokens: ",
            "Capture cuda graph begin. This can take up to several minutes.",
            # EAGLE captures 0.5.8's speculative sizes up to its 48 request slots: 23 graphs x 0.9 s.
            "Capture cuda graph end. Time elapsed: 20.70 s",
            "Capture draft cuda graph begin.",
            "Capture draft cuda graph end.",
            "max_total_num_tokens=",
            "Uvicorn running on http://127.0.0.1:",
            "The server is fired up and ready to roll!",
        ],
    )
    assert order == sorted(order)
    assert log.splitlines()[0].endswith("no GPU is used")


def test_graph_capture_takes_longer_with_more_batch_sizes(tmp_path: Path) -> None:
    code, log = failed_start(tmp_path, [*BASE, "--cuda-graph-max-bs", "512"], {"SGLANG_EMULATOR_FAULTS":
                             '{"port_in_use": true}'})  # fmt: skip
    assert code == 1
    assert "Capture cuda graph end. Time elapsed: 46.80 s" in log


def wait_for_line(server: RunningEmulator, line: str) -> str:
    """The server's log once it holds ``line``: the moment is the server's, however slow the host."""
    deadline = time.monotonic() + 30
    while line not in (log := server.log()):
        assert server.process.poll() is None and time.monotonic() < deadline, log
        time.sleep(0.05)
    return log


def test_health_is_503_until_warmup_finishes(tmp_path: Path) -> None:
    # Held in warmup (its port open, uvicorn running) for as long as the checks take.
    env = {"SGLANG_EMULATOR_FAULTS": '{"hang_at_phase": "warmup"}'}
    with start_emulator(BASE, state_dir=str(tmp_path), env=env, wait=False) as server:
        log = wait_for_line(server, "hanging during startup phase 'warmup'")
        assert "Uvicorn running on http://127.0.0.1:" in log
        assert httpx.get(server.base_url + "/health").status_code == 503
        assert httpx.get(server.base_url + "/health_generate").status_code == 503
        assert "ready to roll" not in server.log()
    # Warmup that ends: no health check answers 200 before the ready line, and one does after it.
    env = {"SGLANG_EMULATOR_FAULTS": '{"slow_readiness_s": 0.8}'}
    with start_emulator(BASE, state_dir=str(tmp_path), env=env, wait=False) as server:
        wait_for_line(server, "Uvicorn running on http://127.0.0.1:")
        deadline = time.monotonic() + 30
        while (status := httpx.get(server.base_url + "/health").status_code) != 200:
            assert status == 503 and time.monotonic() < deadline, status
        assert "The server is fired up and ready to roll!" in server.log()
        assert httpx.get(server.base_url + "/health_generate").status_code == 200


def test_auto_mem_fraction_with_eagle_fails_with_sglangs_oom(tmp_path: Path) -> None:
    code, log = failed_start(
        tmp_path, [*BASE, "--cuda-graph-max-bs", "128", "--disable-custom-all-reduce", *EAGLE]
    )
    assert code != 0
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in log
    assert "Uvicorn running" not in log
    assert list(tmp_path.glob("*.json")) == []


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        (["--enable-flashinfer-allreduce-fusion"], {}, "JIT failed to build trtllm_allreduce_fusion"),
        (["--enable-torch-symm-mem"], {}, "SM120 is not in its architecture table"),
        ([], {"NCCL_ALGO": "Tree"}, "Capture cuda graph failed: NCCL error"),
        (["--ep", "8", "--moe-runner-backend", "flashinfer_cutlass"], {},
         "AssertionError: expert_location_metadata is None"),
        (["--tp", "16"], {}, "invalid device ordinal"),
    ],
)  # fmt: skip
def test_campaign_hard_failures(tmp_path: Path, flags: list[str], env: dict[str, str], expected: str) -> None:
    code, log = failed_start(tmp_path, [*BASE, *flags], env)
    assert code == 1
    assert expected in log
    assert "Received sigquit from a child process" in log


def test_expert_parallel_failure_ends_in_oom_with_less_free_memory(tmp_path: Path) -> None:
    code, log = failed_start(tmp_path, [*BASE, "--ep", "8", "--moe-runner-backend", "flashinfer_cutlass"])
    assert code == 1
    assertion, oom = positions(log, ["expert_location_metadata is None", "torch.OutOfMemoryError"])
    assert assertion < oom
    assert "of which 16.30 GiB is free" in log and "avail mem=21.70 GB" in log


def test_nccl_tree_works_without_cuda_graphs(tmp_path: Path) -> None:
    flags = [*BASE, "--disable-cuda-graph"]
    with start_emulator(flags, state_dir=str(tmp_path), env={"NCCL_ALGO": "Tree"}) as server:
        assert server.wait_ready(30), server.log()
        assert "Capture cuda graph begin" not in server.log()


def test_a_second_server_on_busy_gpus_runs_out_of_memory(tmp_path: Path) -> None:
    with start_emulator(BASE, state_dir=str(tmp_path)) as first:
        assert first.wait_ready(30), first.log()
        code, log = failed_start(tmp_path, BASE)
        assert code == 1
        assert "torch.OutOfMemoryError: CUDA out of memory" in log


def test_release_0_5_23_starts_with_its_own_flags(tmp_path: Path) -> None:
    flags = [
        "--model",
        "/m",
        "--tp-size",
        "8",
        "--cuda-graph-max-bs-decode",
        "64",
        "--mem-fraction-static",
        "0.8",
    ]
    env = {"SGLANG_EMULATOR_RELEASE": "0.5.23"}
    with start_emulator(flags, state_dir=str(tmp_path), env=env) as server:
        assert server.wait_ready(30), server.log()
        info = httpx.get(server.base_url + "/server_info").json()
    assert info["version"] == "0.5.23" and info["cuda_graph_max_bs_decode"] == 64
    assert "emulating SGLang 0.5.23" in server.log()
    assert "SGLang 0.5.23's own code resolved the launch" in server.log()


def test_release_0_5_23_refuses_at_start_what_its_own_pool_code_refuses(tmp_path: Path) -> None:
    """Kimi-K2.5 at 0.5.23's automatic fraction on this host: the release's own pool code finds the
    loaded weights leave no KV cache; the emulator stops with its words, as preflight refuses it."""
    flags = ["--model", "/m", "--tp-size", "8", "--cuda-graph-max-bs-decode", "64"]
    env = {"SGLANG_EMULATOR_RELEASE": "0.5.23"}
    with start_emulator(flags, state_dir=str(tmp_path), env=env) as server:
        assert not server.wait_ready(30)
        log = server.log()
    assert (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.7"
        in log
    )
    assert "Raise --mem-fraction-static above 0.770" in log
