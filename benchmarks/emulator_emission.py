"""How faithfully the emulator emits tokens on its model's schedule, and what that costs in CPU.

Starts the emulator as a child process, streams ``/generate`` with a real HTTP client (httpx)
and compares the emitted decode rate with the performance model's figure:

- 1 stream on a configuration whose model figure is exactly 90 tok/s (the shipped profile
  with its decode compute time shifted so CUDA-graph max bs 128 gives 90.0);
- 64 concurrent streams on the same configuration;
- 1 stream with EAGLE (campaign figure 54.1 tok/s; acceptance is random, so it varies a little).

The decode rate of a request is ``(completion_tokens - first chunk's tokens) / (last chunk time -
first chunk time)``: time to first token is prefill, not decode. CPU is the emulator process's
user+system time from /proc over the measured window. Run: ``python benchmarks/emulator_emission.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpu_time import own_cpu_s, process_cpu_s

from sglang_emulator.launch import parse_launch_flags, resolve_launch
from sglang_emulator.launcher import RunningEmulator, start_emulator
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.profile_loading import DEFAULT_PROFILE, load_profile

TARGET_TOK_S = 90.0
BASE = [
    "--model",
    "/shared/kimi-k2.5-int4",
    "--tp",
    "8",
    "--cuda-graph-max-bs",
    "128",
    "--disable-custom-all-reduce",
]
EAGLE = [
    "--mem-fraction-static", "0.88", "--speculative-algorithm", "EAGLE",
    "--speculative-draft-model-path", "/data/eagle3", "--speculative-num-steps", "2",
    "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "4",
]  # fmt: skip


@dataclass(frozen=True)
class StreamResult:
    """One streamed request as the client saw it."""

    completion_tokens: int
    decode_tokens: int
    decode_s: float
    started_s: float
    finished_s: float
    samples: list[tuple[float, int]]
    """(arrival time, cumulative completion tokens) of every chunk."""

    def tokens_between(self, start_s: float, end_s: float) -> tuple[int, float]:
        """Tokens that arrived in the window and the time between its first and last chunk."""
        inside = [(t, n) for t, n in self.samples if start_s <= t <= end_s]
        if len(inside) < 2:
            return 0, 0.0
        return inside[-1][1] - inside[0][1], inside[-1][0] - inside[0][0]


def _profile_at_target(folder: Path) -> tuple[Path, float]:
    """A copy of the shipped profile whose bs-128 baseline decodes at exactly TARGET_TOK_S."""
    profile = load_profile(DEFAULT_PROFILE)
    config = resolve_launch("0.5.8", parse_launch_flags("0.5.8", BASE), profile)
    step_ms = PerformanceModel(config, profile).decode_step_ms(1)
    shift_ms = 1000 / TARGET_TOK_S - step_ms
    raw = json.loads(
        resources.files("sglang_emulator").joinpath("profiles", f"{DEFAULT_PROFILE}.json").read_text()
    )
    raw["name"] = f"{profile.name}-at-{TARGET_TOK_S:g}-tok-s"
    raw["performance"]["decode_compute_ms"] = profile.performance.decode_compute_ms + shift_ms
    path = folder / "profile-90.json"
    path.write_text(json.dumps(raw))
    return path, shift_ms


def _stream(client: httpx.Client, max_new_tokens: int, prompt: str) -> StreamResult:
    body = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True},
        "stream": True,
    }
    started = time.perf_counter()
    samples: list[tuple[float, int]] = []
    with client.stream("POST", "/generate", json=body, timeout=600) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            samples.append((time.perf_counter(), json.loads(line[6:])["meta_info"]["completion_tokens"]))
    (first_s, first_tokens), (last_s, tokens) = samples[0], samples[-1]
    return StreamResult(tokens, tokens - first_tokens, last_s - first_s, started, last_s, samples)


def _run_concurrent(
    server: RunningEmulator, streams: int, max_new_tokens: int
) -> tuple[list[StreamResult], float]:
    results: list[StreamResult] = []
    lock = threading.Lock()
    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=streams + 4)
    with httpx.Client(base_url=server.base_url, limits=limits) as client:
        _stream(client, 8, "warm up")
        cpu_before = process_cpu_s(server.process.pid)

        def worker(index: int) -> None:
            result = _stream(client, max_new_tokens, f"request {index} asks a question")
            with lock:
                results.append(result)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(streams)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cpu_used = process_cpu_s(server.process.pid) - cpu_before
    return results, cpu_used


def _report(
    label: str, results: list[StreamResult], cpu_s: float, expected_stream_tok_s: float, concurrency: int
) -> dict[str, float]:
    per_stream = [r.decode_tokens / r.decode_s for r in results if r.decode_s > 0]
    wall = max(r.finished_s for r in results) - min(r.started_s for r in results)
    total = sum(r.completion_tokens for r in results)
    measured = statistics.fmean(per_stream)
    # Steady state: the window in which every stream was decoding, so no prefill of a late
    # arrival interrupts it (prefill pauses decode in SGLang and in the emulator alike).
    window_start = max(r.samples[0][0] for r in results)
    window_end = min(r.finished_s for r in results)
    in_window = [r.tokens_between(window_start, window_end) for r in results]
    rates = [n / d for n, d in in_window if d > 0]
    steady = statistics.fmean(rates) if concurrency > 1 and rates else measured
    row = {
        "streams": len(results),
        "model_tok_s_per_stream": expected_stream_tok_s,
        "emitted_tok_s_per_stream": measured,
        "error_pct": (measured - expected_stream_tok_s) / expected_stream_tok_s * 100,
        "steady_state_tok_s_per_stream": steady,
        "steady_state_error_pct": (steady - expected_stream_tok_s) / expected_stream_tok_s * 100,
        "min_stream_tok_s": min(per_stream),
        "max_stream_tok_s": max(per_stream),
        "aggregate_tok_s": total / wall,
        "model_aggregate_decode_tok_s": expected_stream_tok_s * concurrency,
        "emulator_cpu_s": cpu_s,
        "wall_s": wall,
        "emulator_cpu_pct_of_one_core": cpu_s / wall * 100,
    }
    print(f"\n{label}")
    for key, value in row.items():
        print(f"  {key:32} {value:10.2f}")
    return row


def _run_single(server: RunningEmulator, tokens: int, repeats: int) -> tuple[list[StreamResult], float]:
    """One warm-up request, then `repeats` requests one after another; with the emulator's CPU."""
    with httpx.Client(base_url=server.base_url) as client:
        _stream(client, 8, "warm up")
        cpu_before = process_cpu_s(server.process.pid)
        singles = [_stream(client, tokens, f"single {i}") for i in range(repeats)]
        return singles, process_cpu_s(server.process.pid) - cpu_before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512, help="tokens per request at 1 stream")
    parser.add_argument("--repeats", type=int, default=3, help="sequential requests at 1 stream")
    parser.add_argument("--concurrent-tokens", type=int, default=256, help="tokens per request at 64 streams")
    args = parser.parse_args()
    report: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        profile_path, shift_ms = _profile_at_target(Path(folder))
        env = {"SGLANG_EMULATOR_PROFILE": str(profile_path)}
        profile = load_profile(str(profile_path))
        model = PerformanceModel(resolve_launch("0.5.8", parse_launch_flags("0.5.8", BASE), profile), profile)
        model_tok_s = model.single_stream_tok_s()
        print(f"profile shifted by {shift_ms:+.4f} ms per decode step; model: {model_tok_s:.2f} tok/s")
        with start_emulator(BASE, env=env, state_dir=folder) as server:
            if not server.wait_ready(60):
                print(server.log(), file=sys.stderr)
                return 1
            singles, cpu = _run_single(server, args.tokens, args.repeats)
            report["1 stream"] = _report("1 stream", singles, cpu, model.single_stream_tok_s(), 1)
            many, cpu = _run_concurrent(server, 64, args.concurrent_tokens)
            report["64 streams"] = _report("64 streams", many, cpu, 1000 / model.decode_step_ms(64), 64)
        shipped = load_profile(DEFAULT_PROFILE)
        eagle_config = resolve_launch("0.5.8", parse_launch_flags("0.5.8", [*BASE, *EAGLE]), shipped)
        eagle_model = PerformanceModel(eagle_config, shipped)
        with start_emulator([*BASE, *EAGLE], state_dir=folder) as server:
            if not server.wait_ready(60):
                print(server.log(), file=sys.stderr)
                return 1
            singles, cpu = _run_single(server, args.tokens, args.repeats)
            report["EAGLE 1 stream"] = _report(
                "EAGLE, 1 stream", singles, cpu, eagle_model.single_stream_tok_s(), 1
            )
    print(f"\nbenchmark client CPU: {own_cpu_s():.2f} s; cores: {os.cpu_count()}")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
