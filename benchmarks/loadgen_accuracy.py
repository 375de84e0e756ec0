"""How close the load generator's tok/s is to the truth for the load it sent, at the campaign's
shapes (input 1024, output 512) in closed loop at c = 1, 16, 64 and in open loop at three rates.

The truth is the emulator's own scheduler replayed in virtual time: ``replay`` steps
``sglang_emulator.virtual.VirtualEngine`` (the served ``Engine``'s loop: admission over the KV pool,
chunked prefill, retraction, prefill and decode steps each ending at an absolute deadline, with
the step times of ``sglang_emulator.performance.PerformanceModel``) for the same launch, profile
and pool. Its input is what the load generator really sent over the whole run, warmups included
(the scheduler's state carries from one request to the next): each request's send time and
length, so the truth of a closed loop includes the client's own turnaround between two requests
of a stream.

For each repetition: truth tok/s = the repetition's tokens / (last replayed finish - first send);
the load generator's = its ``tok_s_runs`` entry. The error is split in two: the emulator's own
tok/s (each request's send time plus the latency the emulator itself reports for it, the
``e2e_latency`` of its last chunk) against the truth is the emulator falling behind its schedule
(a starved process); the load generator's against the emulator's is what delivery and the client
add. A watcher task in the client's event loop records how late it wakes from a 5 ms sleep: a
client that keeps up wakes within a millisecond; the emulator's share of a core (its process's
CPU time over the level) says whether it had the CPU its schedule needs. Also reported: TTFT
p50 and mean E2E of each side, the share of inter-token gaps under 1 ms, and the issue's bounds
(1 % at c=1, 2 % at c=64).
The benchmark runs the load generator in this process so it can keep the records and the
server's latencies, which the document does not carry.

Run: ``python benchmarks/loadgen_accuracy.py [--repetitions 3] [--rates 0.5,1,2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpu_time import process_cpu_s
from loadgen_records import REPETITIONS, SENT, SERVER_E2E_S, instrument, run_watching_the_loop
from loadgen_truth import compare_level, percentile, replay_run

from sglang_emulator.launch import parse_launch_flags, resolve_launch
from sglang_emulator.launcher import start_emulator
from sglang_emulator.memory import plan_memory
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.pool_limits import pool_limits
from sglang_emulator.profile_loading import DEFAULT_PROFILE, load_profile
from sglang_emulator.virtual import VirtualEngine
from sglang_loadgen import contract
from sglang_loadgen.streaming import RequestRecord
from sglang_world.scheduling import scheduling_rules

RELEASE = "0.5.8"
FLAGS = ["--model", "/shared/kimi-k2.5-int4", "--tp", "8", "--cuda-graph-max-bs", "128"]
FLAGS += ["--disable-custom-all-reduce"]
BOUNDS_PCT = {1: 1.0, 64: 2.0}
"""The issue's bounds on |error| by concurrency."""


def _pct(value: float, reference: float) -> float:
    return 100.0 * (value - reference) / reference


def _pool_tokens(base_url: str) -> int:
    with urllib.request.urlopen(base_url + "/server_info", timeout=10) as reply:
        return int(json.loads(reply.read())["internal_states"][0]["max_total_num_tokens"])


def _virtual_engine() -> VirtualEngine:
    """The scheduler of the benchmark's launch, as the emulator serves it, in virtual time."""
    profile = load_profile(DEFAULT_PROFILE)
    config = resolve_launch(RELEASE, parse_launch_flags(RELEASE, FLAGS), profile)
    limits = pool_limits(config, plan_memory(config, profile))
    return VirtualEngine(
        PerformanceModel(config, profile), limits, scheduling_rules(RELEASE), config.random_seed
    )


def _shapes(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    shapes: list[tuple[str, dict[str, Any]]] = [
        (f"c={c}", {"concurrency": (c,), "requests_per_repetition": max(2, c)})
        for c in (int(v) for v in args.concurrency.split(",") if v)
    ]
    for rate in (float(v) for v in args.rates.split(",") if v):
        shape = {"arrival": "poisson", "request_rate": (rate,), "requests_per_repetition": args.open_requests}
        shapes.append((f"{rate:g} req/s", shape))
    return shapes


def _table(rows: list[dict[str, Any]]) -> None:
    print(
        "\n| load | loadgen tok/s | truth tok/s | error | worst repetition | emulator's own tok/s "
        "| loadgen vs emulator | TTFT p50 ms (loadgen / truth) | mean E2E ms (loadgen / emulator / truth) "
        "| gaps < 1 ms | client loop lag p50 / p99 ms | emulator core % |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        cells = [
            row["load"],
            f"{row['loadgen_tok_s']:.1f}",
            f"{row['truth_tok_s']:.1f}",
            f"{row['error_pct']:+.2f} %",
            f"{row['worst_error_pct']:+.2f} %",
            f"{row['emulator_tok_s']:.1f}",
            f"{row['error_vs_emulator_pct']:+.2f} %",
            f"{row['ttft_p50_ms_loadgen']:.0f} / {row['ttft_p50_ms_truth']:.0f}",
            f"{row['e2e_ms_loadgen']:.0f} / {row['e2e_ms_emulator']:.0f} / {row['e2e_ms_truth']:.0f}",
            f"{row['itl_bunched_pct']:.1f} %",
            f"{row['loop_lag_ms_p50']:.1f} / {row['loop_lag_ms_p99']:.1f}",
            f"{row['emulator_core_pct']:.0f}",
        ]
        print("| " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--rates", default="0.5,1,2", help="open-loop requests per second")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--open-requests", type=int, default=30, help="requests per open-loop repetition")
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=512)
    args = parser.parse_args()
    instrument()
    engine = _virtual_engine()
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    measured: list[tuple[str, Any, list[list[RequestRecord]], dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as folder, start_emulator(FLAGS, state_dir=folder) as server:
        if not server.wait_ready(60):
            print(server.log(), file=sys.stderr)
            return 1
        assert _pool_tokens(server.base_url) == engine.limits.max_total_num_tokens
        for name, shape in _shapes(args):
            workload = contract.Workload(
                url=server.base_url, input_len=args.input_len, output_len=args.output_len,
                warmup_requests=2, repetitions=args.repetitions, **shape,
            )  # fmt: skip
            started, cpu_before = time.monotonic(), process_cpu_s(server.process.pid)
            REPETITIONS.clear()
            document, lags = uvloop.run(run_watching_the_loop(workload))
            (level,) = document.levels
            wall_s = time.monotonic() - started
            extra = {
                "itl_bunched_pct": level.itl_bunched_pct,
                "wall_s": wall_s,
                "emulator_core_pct": 100 * (process_cpu_s(server.process.pid) - cpu_before) / wall_s,
                "loop_lag_ms_p50": 1000 * percentile(lags, 50),
                "loop_lag_ms_p99": 1000 * percentile(lags, 99),
            }
            measured.append((name, level, list(REPETITIONS), extra))
            print(f"{name}: {[round(v, 2) for v in level.tok_s_runs]} tok/s", flush=True)
    truth = replay_run(engine, SENT)
    rows: list[dict[str, Any]] = []
    for name, level, reps, extra in measured:
        row = {"load": name, **compare_level(level.tok_s_runs, reps, truth, SERVER_E2E_S), **extra}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    _table(rows)
    failed = [
        f"{row['load']}: {row['error_pct']:+.2f} % is beyond {bound} %; the emulator itself was "
        f"{_pct(row['emulator_tok_s'], row['truth_tok_s']):+.2f} % off its model and the load generator "
        f"{row['error_vs_emulator_pct']:+.2f} % off the emulator"
        for row in rows
        for c, bound in BOUNDS_PCT.items()
        if row["load"] == f"c={c}" and abs(row["error_pct"]) > bound
    ]
    print("\n" + ("\n".join(failed) if failed else "every bounded error is within its bound"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
