"""Wall time of one campaign's trials on a pool of one emulator host against two.

Makes a throwaway project (the repository's program, a local backend of its own), a base stack on
the emulator with a fast startup and a short single-stream workload, and a campaign of six
trials (CUDA-graph max bs 128/256/512 x custom all-reduce on/off). Runs ``sglang-stacks sweep
run`` with a pool of one host, then, in a fresh backend, of two hosts, and prints both wall times
and their ratio. Every trial is a real ``pulumi up`` and ``pulumi destroy`` through the Automation
API. Run: ``python benchmarks/sweep_pool.py`` (with ``. scripts/env.sh`` done).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


def sweep_wall_time_s(hosts: int) -> tuple[float, dict[str, int]]:
    """Wall time of ``sweep run`` with ``hosts`` pool hosts, and how many trials each host ran."""
    tmp = Path(tempfile.mkdtemp(prefix=f"sweep-{hosts}-"))
    workspace = Workspace.create(tmp)
    workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(tmp / "history.sqlite")
    workspace.init_stack("base", emulator_stack(port=free_port(), state_dir=tmp / "base"))
    pool = "".join(HOST.format(name=f"emu-{i}", tmp=tmp, port=free_port()) for i in range(hosts))
    (workspace.path / "campaigns").mkdir()
    (workspace.path / "campaigns" / "pool.yaml").write_text(CAMPAIGN.format(hosts=pool))
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "sglang_stacks.cli", "sweep", "run", "pool"],
        cwd=workspace.path,
        env=workspace.env(),
        check=True,
        capture_output=True,
        timeout=3600,
    )
    wall_s = time.monotonic() - started
    trials = json.loads((workspace.path / "reports" / "pool" / "sweep.json").read_text())["trials"]
    per_host: dict[str, int] = {}
    for trial in trials.values():
        per_host[trial["host"]] = per_host.get(trial["host"], 0) + 1
    return wall_s, per_host


def main() -> None:
    one_s, one_hosts = sweep_wall_time_s(1)
    print(f"1 host : {one_s:6.1f} s  trials per host {one_hosts}", flush=True)
    two_s, two_hosts = sweep_wall_time_s(2)
    print(f"2 hosts: {two_s:6.1f} s  trials per host {two_hosts}", flush=True)
    print(f"two hosts take {two_s / one_s:.2f} of one host's wall time")


if __name__ == "__main__":
    main()
