"""Aggregate output tok/s of 1, 2 and 3 replicas behind SGLang's router, and the CPU each part used.

Starts three SGLang emulator replicas (each with its own emulated GPUs) and SGLang's real router
(``python -m sglang_router.launch_router``, the ``sglang-router`` package) with no workers; then,
for n = 1, 2, 3, adds the n-th replica through the router's worker API and runs the project's load
generator through the router at ``--streams`` closed-loop streams per replica. One more run sends
the one-replica load straight to replica 1, without the router, for the router's overhead.

For each run it reports the tok/s and the CPU cores each part used over the run (user+system time
from /proc/<pid>/stat for the router and the replicas, getrusage for the load generator, which runs
in this process), the machine's load average, and its CPU pressure (Linux PSI: the share of the run
during which some runnable task waited for a core). The router and the client are not the
bottleneck when their cores stay well below one while tok/s grows with the replicas. The
emulator's time scale only shortens its startup: it decodes at the modeled speed, sleeping between
steps, so a replica needs little CPU unless the machine makes it wait for a core.

Run: ``. .venv/sglang-stacks.env && python benchmarks/fleet_scaling.py [--time-scale 0.05]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpu_time import own_cpu_s, process_cpu_s

from sglang_emulator.launcher import RunningEmulator, free_port, start_emulator
from sglang_loadgen import client, contract

FLAGS = [
    "--model-path", "/shared/kimi-k2.5-int4", "--tp", "8", "--trust-remote-code",
    "--cuda-graph-max-bs", "128", "--disable-custom-all-reduce",
]  # fmt: skip


def cpu_pressure_s() -> float | None:
    """Seconds during which some runnable task of the machine waited for a core (Linux PSI), or
    None without /proc/pressure/cpu."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None
    return int(some.rsplit("total=", 1)[1]) / 1e6


@dataclass
class Run:
    """One measured load: its tok/s and the cores each part used."""

    label: str
    tok_s: float
    errors: int
    router_cores: float
    client_cores: float
    replica_cores: float
    load_average: float
    cpu_pressure_pct: float | None
    """The share of the run during which some task of the machine waited for a core."""


def start_router(policy: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
            "--port", str(port), "--policy", policy, "--log-level", "warn",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/liveness", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("SGLang's router did not become live within 60 s.")


def add_worker(router: str, worker: str) -> None:
    """Registers ``worker`` and waits until the router lists it healthy."""
    httpx.post(f"{router}/workers", json={"url": worker}, timeout=30).raise_for_status()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = httpx.get(f"{router}/workers", timeout=10).json()["workers"]
        if any(w["url"].rstrip("/") == worker and w["is_healthy"] for w in listed):
            return
        time.sleep(0.2)
    raise SystemExit(f"The router did not list {worker} healthy within 60 s.")


def measure(label: str, url: str, streams: int, args: argparse.Namespace, pids: list[int]) -> Run:
    """One closed-loop run of the load generator against ``url``; ``pids``: [router, replicas...]."""
    workload = contract.Workload(
        url=url, input_len=args.input_len, output_len=args.output_len, concurrency=(streams,),
        warmup_requests=streams, repetitions=1, requests_per_repetition=streams * args.rounds,
    )  # fmt: skip
    before = [process_cpu_s(pid) for pid in pids]
    own_before, pressure_before, wall_before = own_cpu_s(), cpu_pressure_s(), time.perf_counter()
    document = client.run(workload)
    wall_s = time.perf_counter() - wall_before
    pressure_after = cpu_pressure_s()
    waited = None if pressure_before is None or pressure_after is None else pressure_after - pressure_before
    used = [process_cpu_s(pid) - b for pid, b in zip(pids, before, strict=True)]
    (level,) = document.levels
    return Run(
        label=label,
        tok_s=level.tok_s_runs[0],
        errors=level.errors,
        router_cores=used[0] / wall_s,
        client_cores=(own_cpu_s() - own_before) / wall_s,
        replica_cores=sum(used[1:]) / wall_s,
        load_average=os.getloadavg()[0],
        cpu_pressure_pct=None if waited is None else 100 * waited / wall_s,
    )


def run_all(
    args: argparse.Namespace,
    router: subprocess.Popen[bytes],
    router_url: str,
    replicas: list[RunningEmulator],
) -> list[Run]:
    """The direct run, then one run through the router per replica count."""
    first = replicas[0]
    direct = measure("1 replica, direct", first.base_url, args.streams, args, [router.pid, first.process.pid])
    runs = []
    for n in range(1, len(replicas) + 1):
        add_worker(router_url, replicas[n - 1].base_url)
        pids = [router.pid, *(r.process.pid for r in replicas[:n])]
        runs.append(measure(f"{n} replica(s), router", router_url, args.streams * n, args, pids))
    return [runs[0], direct, *runs[1:]]


def table(runs: list[Run]) -> str:
    lines = [
        "| run | tok/s | x one replica | router cores | client cores | replicas' cores | errors | load avg "
        "| CPU pressure |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    one = runs[0].tok_s
    for run in runs:
        lines.append(
            f"| {run.label} | {run.tok_s:.0f} | {run.tok_s / one:.2f} | {run.router_cores:.2f} | "
            f"{run.client_cores:.2f} | {run.replica_cores:.2f} | {run.errors} | {run.load_average:.2f} | "
            f"{'-' if run.cpu_pressure_pct is None else f'{run.cpu_pressure_pct:.0f} %'} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--streams", type=int, default=8, help="closed-loop streams per replica")
    parser.add_argument("--rounds", type=int, default=4, help="requests per stream in a measured run")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--time-scale", type=float, default=0.05, help="the emulator startup's time scale")
    parser.add_argument("--policy", default="round_robin")
    args = parser.parse_args()

    replicas: list[RunningEmulator] = []
    router, router_url = start_router(args.policy)
    try:
        with tempfile.TemporaryDirectory() as folder:
            for i in range(args.replicas):
                gpus = str(Path(folder) / f"gpus{i}")  # each replica is a host with its own GPUs
                replica = start_emulator(FLAGS, time_scale=args.time_scale, state_dir=gpus, timeout_s=300)
                replicas.append(replica)
            runs = run_all(args, router, router_url, replicas)
    finally:
        for replica in replicas:
            replica.stop()
        router.terminate()
        router.wait(10)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
          f"time scale {args.time_scale:g}, {args.streams} streams per replica, "
          f"{args.input_len} in / {args.output_len} out tokens")  # fmt: skip
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
