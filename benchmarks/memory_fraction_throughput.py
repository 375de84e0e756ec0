"""Throughput against the memory fraction on the seeds' host, at 8, 32 and 64 streams.

For each fraction the real emulator (``python -m sglang_emulator``, profile
``rtx-pro-6000-x8-kimi-k2.5-int4``, startup at the launcher's time scale) starts with the argv the
project renders for the ``baseline-bs128`` stack at that ``--mem-fraction-static``, and the
project's load generator runs over HTTP at each stream count (1024 prompt tokens, 512 out, the
campaign's shape; ``--repetitions`` repetitions of one request per stream). Its log gives the KV
pool, the most requests it ran at once, the highest token usage and the retractions. Beside each
measured tok/s stands what the emulator's scheduler gives for the same launch in virtual time
(``sglang_emulator.virtual``): the arithmetic of SGLang's admission over that pool.

A larger fraction is a larger KV pool; while the pool binds (fewer requests fit than there are
streams) tok/s grows with it, then stays level. Draws the figure (``--out``), writes the
measurements as JSON (``--json``), prints the tables of ``docs/results.md`` and, in virtual time,
what the chunked prefill size (``--chunks``) changes at three fractions.

Run: ``python benchmarks/memory_fraction_throughput.py [--fractions 0.78,0.80,...]
[--out docs/memory-fraction-throughput.png] [--json results.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_emulator.engine import Request
from sglang_emulator.launch import parse_launch_flags, resolve_launch
from sglang_emulator.launcher import start_emulator
from sglang_emulator.memory import plan_memory, served_config
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.pool_limits import pool_limits
from sglang_emulator.profile_loading import load_profile
from sglang_emulator.virtual import VirtualEngine
from sglang_loadgen import client, contract
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_world.scheduling import scheduling_rules

ROOT = Path(__file__).resolve().parent.parent
STACK = "baseline-bs128"
FRACTIONS = "0.76,0.765,0.77,0.775,0.78,0.785,0.79,0.80,0.81,0.82,0.84,0.86,0.88,0.90"
"""Worked out in virtual time (where a launch fails, the error it fails with)."""
HTTP_FRACTIONS = "0.775,0.78,0.785,0.79,0.80,0.81,0.82,0.84,0.86,0.88,0.90"
"""Measured over HTTP: the fractions that serve every request's whole output."""
STREAMS = (8, 32, 64)
CHUNK_FRACTIONS = (0.80, 0.84, 0.88)


RELEASE = load_stack_spec(STACK, ROOT / "stacks").environment.sglang_release
"""The SGLang release the stack pins: its flags, memory and scheduling rules."""


def argv_at(fraction: float) -> list[str]:
    """The launch the project renders for the stack at ``fraction``, without its port and host."""
    spec = load_stack_spec(STACK, ROOT / "stacks")
    spec = spec.model_copy(
        update={"server": spec.server.model_copy(update={"mem_fraction_static": fraction})}
    )
    argv = render_argv(spec.launch_flags(), RELEASE)
    for flag in ("--port", "--host"):
        if flag in argv:
            at = argv.index(flag)
            argv = argv[:at] + argv[at + 2 :]
    return argv


class _PrefillFailed(Exception):
    """The scheduler died at a prefill whose activations did not fit (SGLang's out of memory)."""


def virtual_tok_s(
    argv: list[str], streams: int, repetitions: int, input_len: int, output_len: int
) -> float | str:
    """The same closed loop on the emulator's scheduler in virtual time: mean tok/s of the
    repetitions, or where the launch fails, as the served emulator would (SGLang's error)."""
    profile = load_profile()
    config = resolve_launch(RELEASE, parse_launch_flags(RELEASE, argv), profile, {})
    try:
        plan = plan_memory(config, profile)
    except ValueError as refusal:
        return f"refused: {refusal}"
    if plan.failure is not None:
        return f"fails at {plan.failure.phase}: {plan.failure.message}"
    config = served_config(config, plan)
    finished: list[tuple[float, int]] = []
    left = [0]

    def send() -> None:
        left[0] -= 1
        number = engine.stats.requests_total
        prompt = [number * 7919 + 1, *range(2, input_len + 1)]
        engine.submit(Request(rid=str(number), prompt_ids=prompt, max_new_tokens=output_len))

    def done(request: Request) -> None:
        # Its output may be cut to what the pool leaves after its prompt, as SGLang cuts it.
        finished.append((engine.now_s, request.completion_tokens))
        if left[0] > 0:
            send()

    def before_prefill(tokens: int) -> None:
        failure = plan.prefill_failure(tokens)
        if failure is not None:
            raise _PrefillFailed(failure)

    engine = VirtualEngine(
        PerformanceModel(config, profile),
        pool_limits(config, plan),
        scheduling_rules(RELEASE, {}),
        config.random_seed,
        done,
        before_prefill=before_prefill,
    )
    runs = []
    try:
        for _ in range(repetitions):
            start, left[0] = engine.now_s, streams
            finished.clear()
            for _ in range(streams):
                send()
            engine.advance()
            runs.append(sum(t for _, t in finished) / (max(s for s, _ in finished) - start))
    except _PrefillFailed as failure:
        return f"fails at a prefill: {failure}"
    return fmean(runs)


def measure(fraction: float, repetitions: int, input_len: int, output_len: int) -> dict[str, Any]:
    """The emulator at ``fraction`` over HTTP: each stream count's tok/s, and its log's pool figures."""
    argv = argv_at(fraction)
    with (
        tempfile.TemporaryDirectory(prefix="fraction-") as state,
        start_emulator(argv, state_dir=state) as server,
    ):
        if not server.wait_ready(60):
            return {"fraction": fraction, "failure": server.log().strip().splitlines()[-1]}
        levels = {}
        for streams in STREAMS:
            workload = contract.Workload(
                url=server.base_url, input_len=input_len, output_len=output_len, concurrency=(streams,),
                warmup_requests=0, repetitions=repetitions, requests_per_repetition=streams,
            )  # fmt: skip
            (level,) = client.run(workload).levels
            levels[streams] = {
                "tok_s": fmean(level.tok_s_runs),
                "tok_s_runs": level.tok_s_runs,
                "errors": level.errors,
                "output_tokens": fmean(r.completion_tokens for r in level.records),
                "virtual_tok_s": virtual_tok_s(argv, streams, repetitions, input_len, output_len),
            }
        log = server.log()
    return {
        "fraction": fraction,
        "kv_tokens": int(re.findall(r"max_total_num_tokens=(\d+)", log)[0]),
        "max_running": max(int(n) for n in re.findall(r"#running-req: (\d+)", log)),
        "max_token_usage": max(float(u) for u in re.findall(r"token usage: ([0-9.]+)", log)),
        "retractions": sum(int(n) for n in re.findall(r"#retracted_reqs: (\d+)", log)),
        "levels": levels,
    }


def draw(rows: list[dict[str, Any]], virtual: dict[float, dict[int, float | str]], out: Path) -> None:
    """Measured tok/s against the fraction at each stream count, the virtual-time figures dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for streams, colour in zip(STREAMS, ("tab:blue", "tab:orange", "tab:green"), strict=True):
        measured = [(r["fraction"], r["levels"][streams]["tok_s"]) for r in rows if "levels" in r]
        axes.plot(*zip(*measured, strict=True), "o-", color=colour, label=f"{streams} streams (over HTTP)")
        model = sorted((f, v[streams]) for f, v in virtual.items() if isinstance(v[streams], float))
        axes.plot(*zip(*model, strict=True), ":", color=colour, alpha=0.7)
    pools = [(r["fraction"], r["kv_tokens"]) for r in rows if "levels" in r]
    top = axes.secondary_xaxis("top")
    top.set_xticks([f for f, _ in pools], [f"{tokens / 1000:.0f}k" for _, tokens in pools], fontsize=7)
    top.set_xlabel("KV pool, tokens", fontsize=8)
    axes.set_xlabel("--mem-fraction-static")
    axes.set_ylabel("output tok/s (1024 in, 512 out)")
    axes.set_title("Kimi-K2.5 INT4, 8 x RTX PRO 6000 (emulated): throughput against the KV pool", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(title="dotted: the scheduler in virtual time", fontsize=8, title_fontsize=8)
    figure.tight_layout()
    figure.savefig(out)


def _cell(value: float | str) -> str:
    """A tok/s, or a failure's first sentence."""
    return f"{value:.1f}" if isinstance(value, float) else value.split(". ")[0]


def print_tables(rows: list[dict[str, Any]], virtual: dict[float, dict[int, float | str]]) -> None:
    """The measured table (virtual time in brackets), then fractions measured in virtual time only."""
    print("\n| fraction | KV tokens | most running | highest token usage | retractions | output tokens "
          "per request | " + " | ".join(f"{s} streams tok/s (virtual)" for s in STREAMS) + " |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in STREAMS) + " |")
    for row in rows:
        if "levels" not in row:
            print(f"| {row['fraction']:.3f} | failed: {row['failure']} |")
            continue
        levels = row["levels"]
        cells = [f"{levels[s]['tok_s']:.1f} ({_cell(levels[s]['virtual_tok_s'])})" for s in STREAMS]
        outputs = sorted({round(levels[s]["output_tokens"]) for s in STREAMS})
        head = f"| {row['fraction']:.3f} | {row['kv_tokens']:,} | {row['max_running']} | "
        head += f"{row['max_token_usage']:.2f} | {row['retractions']} | {'-'.join(map(str, outputs))} | "
        print(head + " | ".join(cells) + " |")
    measured = {row["fraction"] for row in rows}
    print("\nIn virtual time only:\n")
    print("| fraction | " + " | ".join(f"{s} streams tok/s" for s in STREAMS) + " |")
    print("| ---: | " + " | ".join("---:" for _ in STREAMS) + " |")
    for fraction, levels in sorted(virtual.items()):
        if fraction not in measured:
            print(f"| {fraction:.3f} | " + " | ".join(_cell(levels[s]) for s in STREAMS) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fractions", default=HTTP_FRACTIONS, help="measured over HTTP")
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=512)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "memory-fraction-throughput.png")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--chunks", default="2048,4096,8192,16384,-1", help="chunked prefill sizes (virtual time)"
    )
    args = parser.parse_args()
    shape = (args.repetitions, args.input_len, args.output_len)
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    started = time.monotonic()
    virtual = {
        float(f): {s: virtual_tok_s(argv_at(float(f)), s, *shape) for s in STREAMS}
        for f in FRACTIONS.split(",")
    }
    rows = []
    for fraction in (float(f) for f in args.fractions.split(",") if f):
        row = measure(fraction, *shape)
        rows.append(row)
        print(json.dumps(row), flush=True)
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"load average at end: {load}; {time.monotonic() - started:.0f} s")
    print_tables(rows, virtual)
    print("\n| fraction | chunked prefill size | " + " | ".join(f"{s} streams tok/s" for s in STREAMS) + " |")
    print("| ---: | ---: | " + " | ".join("---:" for _ in STREAMS) + " |")
    for fraction in CHUNK_FRACTIONS:
        for chunk in (int(c) for c in args.chunks.split(",")):
            argv = [*argv_at(fraction), "--chunked-prefill-size", str(chunk)]
            cells = [_cell(virtual_tok_s(argv, s, *shape)) for s in STREAMS]
            print(f"| {fraction:.2f} | {chunk if chunk > 0 else 'off'} | " + " | ".join(cells) + " |")
    if rows:
        draw(rows, virtual, args.out)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "virtual": virtual}, indent=1))
    return 1 if any("failure" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
