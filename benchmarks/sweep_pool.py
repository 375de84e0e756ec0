"""Wall time of one campaign's trials on a pool of one emulator host against two.

Makes a throwaway project (the repository's program, a local backend of its own), a base stack on
the emulator with a fast startup and a short single-stream workload, and a campaign of six
trials (CUDA-graph max bs 128/256/512 x custom all-reduce on/off). Runs ``sglang-stacks sweep
run`` with a pool of one host, then, in a fresh backend, of two hosts, and prints both wall times
and their ratio. Every trial is a real ``pulumi up`` and ``pulumi destroy`` through the Automation
API. Run: ``python benchmarks/sweep_pool.py`` (with ``. scripts/env.sh`` done).

Beside the wall times it prints what explains them: each trial's own duration (from the sweep
file), how much of the wall time both hosts were busy at once, the CPU time the sweep and every
process it waited for used (Pulumi, the program, its providers), and the machine's load average
sampled during each run. Trials that overlap but each take longer with two hosts point at a
shared CPU; trials that do not overlap would point at the scheduler.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import optuna

from sglang_stacks.campaign.attributes import records
from sglang_stacks.campaign.study import STUDY_FILE
from tests._pulumi import Workspace, emulator_stack, free_port

HOST = """  - name: {name}
    host: {{kind: emulator, state_dir: {tmp}/{name}/host}}
    port: {port}
    emulator_state_dir: {tmp}/{name}/gpus
"""
CAMPAIGN = """\
base: base
axes:
  - {{key: server.cuda_graph_max_bs, values: [128, 256, 512]}}
  - {{key: server.disable_custom_all_reduce, values: [true, false]}}
workload: {{input_len: 32, output_len: 128, warmup_requests: 1, repetitions: 4, requests_per_repetition: 1}}
pool:
{hosts}"""


@dataclass(frozen=True)
class Run:
    """One sweep: its wall time and what it is made of."""

    wall_s: float
    per_host: dict[str, int]
    trial_s: list[float]
    both_busy_s: float
    cpu_s: float
    load: list[float]


def _both_busy_s(spans: dict[str, list[tuple[float, float]]]) -> float:
    """Seconds during which every host ran a trial (the overlap of the hosts' busy spans)."""
    hosts = list(spans.values())
    if len(hosts) < 2:
        return 0.0
    return sum(max(0.0, min(a[1], b[1]) - max(a[0], b[0])) for a in hosts[0] for b in hosts[1])


def _sample_load(samples: list[float], done: threading.Event) -> None:
    while not done.wait(2.0):
        samples.append(os.getloadavg()[0])


def sweep(hosts: int) -> Run:
    """``sweep run`` with ``hosts`` pool hosts, timed."""
    tmp = Path(tempfile.mkdtemp(prefix=f"sweep-{hosts}-"))
    workspace = Workspace.create(tmp)
    workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(tmp / "history.sqlite")
    workspace.init_stack("base", emulator_stack(port=free_port(), state_dir=tmp / "base"))
    pool = "".join(HOST.format(name=f"emu-{i}", tmp=tmp, port=free_port()) for i in range(hosts))
    (workspace.path / "campaigns").mkdir()
    (workspace.path / "campaigns" / "pool.yaml").write_text(CAMPAIGN.format(hosts=pool))
    load: list[float] = []
    done = threading.Event()
    sampler = threading.Thread(target=_sample_load, args=(load, done), daemon=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    sampler.start()
    try:
        subprocess.run(
            [sys.executable, "-m", "sglang_stacks.cli", "sweep", "run", "pool"],
            cwd=workspace.path,
            env=workspace.env(),
            check=True,
            capture_output=True,
            timeout=3600,
        )
    finally:
        done.set()
    wall_s = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    study_db = workspace.path / "reports" / "pool" / STUDY_FILE
    launched = [
        t
        for t in records(optuna.load_study(study_name="pool", storage=f"sqlite:///{study_db}"))
        if t.launched
    ]
    per_host: dict[str, int] = {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for trial in launched:
        assert trial.host is not None and trial.started_at is not None and trial.finished_at is not None
        per_host[trial.host] = per_host.get(trial.host, 0) + 1
        spans.setdefault(trial.host, []).append((trial.started_at, trial.finished_at))
    trial_s = [end - start for host in spans.values() for start, end in host]
    return Run(wall_s, per_host, trial_s, _both_busy_s(spans), cpu_s, load)


def _line(name: str, run: Run) -> str:
    load = f"{fmean(run.load):.1f} (max {max(run.load):.1f})" if run.load else "n/a"
    return (
        f"{name}: {run.wall_s:6.1f} s  trials per host {run.per_host}  trial {fmean(run.trial_s):.1f} s "
        f"mean ({min(run.trial_s):.1f} to {max(run.trial_s):.1f})  both hosts busy {run.both_busy_s:.1f} s  "
        f"CPU {run.cpu_s:.1f} s  load average {load}"
    )


def main() -> None:
    print(f"cores: {os.cpu_count()}  load average before: {os.getloadavg()[0]:.1f}", flush=True)
    one = sweep(1)
    print(_line("1 host ", one), flush=True)
    two = sweep(2)
    print(_line("2 hosts", two), flush=True)
    print(f"two hosts take {two.wall_s / one.wall_s:.2f} of one host's wall time")


if __name__ == "__main__":
    main()
