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
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_emulator.engine import Request
from sglang_emulator.launch import parse_launch_flags, resolve_launch
from sglang_emulator.launcher import start_emulator
from sglang_emulator.memory import plan_memory
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.pool_limits import pool_limits
from sglang_emulator.profile_loading import DEFAULT_PROFILE, load_profile
from sglang_emulator.virtual import VirtualEngine
from sglang_loadgen import client, contract, streaming
from sglang_loadgen.document import Document
from sglang_loadgen.streaming import RequestRecord
from sglang_world.scheduling import scheduling_rules

RELEASE = "0.5.8"
FLAGS = ["--model", "/shared/kimi-k2.5-int4", "--tp", "8", "--cuda-graph-max-bs", "128"]
FLAGS += ["--disable-custom-all-reduce"]
BOUNDS_PCT = {1: 1.0, 64: 2.0}
"""The issue's bounds on |error| by concurrency."""


@dataclass
class _Replayed:
    """One request in the replay: when it arrived, its lengths, and what the scheduler did."""

    arrived_s: float
    input_len: int
    output_len: int
    first_token_s: float = 0.0
    finished_s: float = 0.0


def replay(engine: VirtualEngine, requests: list[_Replayed]) -> None:
    """Fill in each request's first-token and finish times as the emulator's scheduler produces
    them for these arrivals, in virtual time, after the server's own warmup request."""
    engine.submit(Request(rid="warmup", prompt_ids=[1, 2, 3, 4, 5, 6], max_new_tokens=8))
    engine.advance()
    start = engine.now_s
    sent: list[tuple[_Replayed, Request]] = []
    for number, replayed in enumerate(sorted(requests, key=lambda r: r.arrived_s)):
        engine.advance(until_s=start + replayed.arrived_s)
        # Fresh prompts, as the load generator's: no prefix shared with another request.
        prompt = [number * 7919 + 1, *range(2, replayed.input_len + 1)]
        request = Request(rid=str(number), prompt_ids=prompt, max_new_tokens=replayed.output_len)
        engine.submit(request)
        sent.append((replayed, request))
    engine.advance()
    for replayed, request in sent:
        assert request.first_token_s is not None and request.finished_s is not None
        replayed.first_token_s = request.first_token_s - start
        replayed.finished_s = request.finished_s - start


_SENT: list[list[RequestRecord]] = []
"""Every batch of the run (warmups and repetitions) as the client kept them, in send order."""
_REPETITIONS: list[list[RequestRecord]] = []
"""Every measured repetition's records (absolute send and finish times)."""
_SERVER_E2E_S: dict[int, float] = {}
"""The emulator's own latency of each request (``meta_info.e2e_latency`` of its last chunk), by record."""


def _instrument() -> None:
    """Keep every batch's records and the server's latency of each request, which the load
    generator's document does not carry (it runs in this process, so its classes are wrapped)."""
    batch, finish = client._Run.batch, streaming._Reader.finish

    async def kept_batch(run: client._Run, level: float, total: int, rep: int) -> list[RequestRecord]:
        records = await batch(run, level, total, rep)
        _SENT.append(records)
        if rep >= 0:
            _REPETITIONS.append(records)
        return records

    def finish_with_server_latency(reader: streaming._Reader) -> None:
        finish(reader)
        meta = (json.loads(reader.last_event).get("meta_info") or {}) if reader.last_event else {}
        if meta.get("e2e_latency") is not None:
            _SERVER_E2E_S[id(reader.record)] = float(meta["e2e_latency"])

    client._Run.batch = kept_batch  # type: ignore[method-assign,assignment]
    streaming._Reader.finish = finish_with_server_latency  # type: ignore[method-assign,assignment]


async def _run_watching_the_loop(workload: contract.Workload) -> tuple[Document, list[float]]:
    """The load generator's run, and how late its event loop woke a 5 ms sleep all along: a busy
    or starved client would read chunks that late."""
    lags: list[float] = []

    async def watch() -> None:
        while True:
            due = time.perf_counter() + 0.005
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - due)

    watcher = asyncio.ensure_future(watch())
    try:
        return await client.run_async(workload), lags
    finally:
        watcher.cancel()


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def replay_run(engine: VirtualEngine) -> dict[int, _Replayed]:
    """The replay of every request the run sent (warmups included), by its record."""
    records = [r for batch in _SENT for r in batch]
    start = min(r.sent_s for r in records)
    replayed = {id(r): _Replayed(r.sent_s - start, r.prompt_tokens, r.completion_tokens) for r in records}
    replay(engine, list(replayed.values()))
    return replayed


def compare_level(
    tok_s_runs: list[float], reps: list[list[RequestRecord]], truth: dict[int, _Replayed]
) -> dict[str, float]:
    """The level's tok/s, TTFT and E2E against the replay of every repetition's sent requests, and
    the emulator's own tok/s (each request's send time plus the server's latency of it)."""
    errors, truths, served, against_server = [], [], [], []
    ttft: dict[str, list[float]] = {"loadgen": [], "truth": []}
    e2e: dict[str, list[float]] = {"loadgen": [], "emulator": [], "truth": []}
    for measured, records in zip(tok_s_runs, reps, strict=True):
        start = min(r.sent_s for r in records)
        requests = [truth[id(r)] for r in records]
        first = min(r.arrived_s for r in requests)
        tokens = sum(r.completion_tokens for r in records)
        truth_tok_s = tokens / (max(r.finished_s for r in requests) - first)
        server_s = [_SERVER_E2E_S[id(r)] for r in records]
        emulator = tokens / max(r.sent_s - start + s for r, s in zip(records, server_s, strict=True))
        truths.append(truth_tok_s)
        served.append(emulator)
        errors.append(100.0 * (measured - truth_tok_s) / truth_tok_s)
        against_server.append(100.0 * (measured - emulator) / emulator)
        ttft["loadgen"] += [1000 * (r.ttft_s or 0.0) for r in records]
        ttft["truth"] += [1000 * (r.first_token_s - r.arrived_s) for r in requests]
        e2e["loadgen"] += [1000 * r.latency_s for r in records]
        e2e["emulator"] += [1000 * s for s in server_s]
        e2e["truth"] += [1000 * (r.finished_s - r.arrived_s) for r in requests]
    return {
        "loadgen_tok_s": statistics.fmean(tok_s_runs),
        "truth_tok_s": statistics.fmean(truths),
        "error_pct": statistics.fmean(errors),
        "worst_error_pct": max(errors, key=abs),
        "emulator_tok_s": statistics.fmean(served),
        "error_vs_emulator_pct": statistics.fmean(against_server),
        "ttft_p50_ms_loadgen": _percentile(ttft["loadgen"], 50),
        "ttft_p50_ms_truth": _percentile(ttft["truth"], 50),
        **{f"e2e_ms_{who}": statistics.fmean(values) for who, values in e2e.items()},
    }


def _cpu_s(pid: int) -> float:
    """A process's user+system CPU seconds so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    _instrument()
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
            started, cpu_before = time.monotonic(), _cpu_s(server.process.pid)
            _REPETITIONS.clear()
            document, lags = uvloop.run(_run_watching_the_loop(workload))
            (level,) = document.levels
            wall_s = time.monotonic() - started
            extra = {
                "itl_bunched_pct": level.itl_bunched_pct,
                "wall_s": wall_s,
                "emulator_core_pct": 100 * (_cpu_s(server.process.pid) - cpu_before) / wall_s,
                "loop_lag_ms_p50": 1000 * _percentile(lags, 50),
                "loop_lag_ms_p99": 1000 * _percentile(lags, 99),
            }
            measured.append((name, level, list(_REPETITIONS), extra))
            print(f"{name}: {[round(v, 2) for v in level.tok_s_runs]} tok/s", flush=True)
    truth = replay_run(engine)
    rows: list[dict[str, Any]] = []
    for name, level, reps, extra in measured:
        row = {"load": name, **compare_level(level.tok_s_runs, reps, truth), **extra}
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
