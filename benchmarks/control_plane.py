"""How long the everyday Pulumi commands take against a deployed stack, next to floors on the same
CLI and backend: an empty Pulumi program (one export), and a program with one trivial dynamic
resource (what any program with a dynamic provider pays: the provider process of each engine run).
With Go on PATH, two more show what providers compiled to a plugin would cost at best: a program
with one resource of a provider that does nothing (``compiled_floor/``), and a program that does
the Python work a program of ours keeps in any design (load the spec, run the preflight, render
the flags, plan the memory) and registers a deployment's five resources with that provider.
Also how many SSH connections (handshakes) and sessions (round trips) each opens at the host.

Runs a real sshd on 127.0.0.1 (the tests' fixture) in front of the SGLang emulator, and the same
sshd behind a TCP proxy that delays every chunk by 25 ms each way (a host 50 ms away; the kernel
here has no netem). Commands run interleaved, ``--rounds`` times; medians are printed with their
ratio to each floor's. The one-flag change is printed with the work it cannot avoid: the old
server's stop, the new one's start and the benchmark, timed by the engine's own log (the
providers' Delete and Create calls), so the rest is the control plane's.

Run: ``. .venv/sglang-stacks.env && python benchmarks/control_plane.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests._pulumi import Workspace, emulator_stack, free_port
from tests.sshd import SshServer, start_sshd
from tests.test_deployment import new_stack, ssh_config, write_config

EMPTY_PROGRAM = 'import pulumi\n\npulumi.export("answer", 42)\n'
DYNAMIC_PROGRAM = """import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider


class Noop(ResourceProvider):
    def create(self, props):
        return CreateResult("noop", props)


class Thing(Resource):
    def __init__(self, name):
        super().__init__(Noop(), name, {"value": 1})


pulumi.export("answer", Thing("thing").id)
"""
COMPILED_PROGRAM = """import pulumi


class Thing(pulumi.CustomResource):
    def __init__(self, name):
        super().__init__("floor:index:Thing", name, {"value": 1})


pulumi.export("answer", Thing("thing").id)
"""
SPEC_COMPILED_PROGRAM = """import pulumi

from sglang_stacks.config import preflight, render
from sglang_stacks.config.flags import launch_values
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import SECTION_KEYS, load_spec

config = pulumi.Config()
sections = {key: config.get_object(key) for key in SECTION_KEYS if config.get(key) is not None}
spec = load_spec(sections, pulumi.get_stack())
release = spec.environment.sglang_release
preflight.raise_on_errors(preflight.run_preflight(spec, release))
flags = launch_values(render.canonical_flags(spec.launch_flags(), release))
memory = plan_memory(spec, release).as_dict()
deployment = pulumi.ComponentResource("floor:index:Deployment", "deployment")
inputs = {"probe": {"gpus": spec.host.gpu_count}, "claim": {"stack": pulumi.get_stack()},
          "environment": {"release": release}, "server": {"flags": flags},
          "benchmark": {"workload": spec.benchmark.settings()}}
for name, props in inputs.items():
    part = pulumi.CustomResource("floor:index:Thing", name, props, pulumi.ResourceOptions(parent=deployment))
    pulumi.export(name, part.id)
pulumi.export("memory_plan", memory)
"""
PROGRAMS = {"empty": EMPTY_PROGRAM, "dynamic": DYNAMIC_PROGRAM}
COMPILED = {"compiled": COMPILED_PROGRAM, "spec-compiled": SPEC_COMPILED_PROGRAM}
FLOOR_NAMES = {
    "empty": "empty program",
    "dynamic": "one dynamic resource",
    "compiled": "one compiled resource",
    "spec-compiled": "our spec's work, five compiled resources",
}
# A release of its own gives the benchmark's stacks an environment of their own on this machine:
# other stacks deployed here meanwhile (tests) share the 0.5.8 one and may copy other code into it.
RELEASE = "0.5.8.post1"


class DelayingProxy:
    """A TCP proxy on 127.0.0.1 that forwards to ``target_port``, each chunk ``delay_s`` late in
    each direction (in order), in an asyncio loop on a thread of its own."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port, self.delay_s, self.port = target_port, delay_s, free_port()
        self.accepted = 0
        ready = threading.Event()
        threading.Thread(target=lambda: asyncio.run(self._serve(ready)), daemon=True).start()
        ready.wait(10)

    async def _serve(self, ready: threading.Event) -> None:
        server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        ready.set()
        async with server:
            await server.serve_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not chunk:
                    writer.close()
                    return
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionError:
                chunk = b""
            queue.put_nowait((time.monotonic() + self.delay_s, chunk))
            if not chunk:
                break
        await sender


def command(workspace: Workspace, *args: str) -> Callable[[], object]:
    """`pulumi <args>` in ``workspace``, to run later."""
    return lambda: workspace.run(*args)


Timing = tuple[float, int, int, float]
"""Seconds, SSH connections, SSH sessions and CPU seconds of one command."""


def cpu_s() -> float:
    """CPU seconds (user and system) of this process's ended children and their descendants: on a
    machine shared with other work, a command's CPU time varies far less than its duration."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(sshd: SshServer, action: Callable[[], object]) -> Timing:
    """Seconds ``action`` took, the SSH connections and sessions sshd started meanwhile, and the
    CPU seconds it used on this machine (the host's side of the emulator included)."""
    before, started, cpu = (sshd.connections(), sshd.sessions()), time.monotonic(), cpu_s()
    action()
    took = time.monotonic() - started
    return took, sshd.connections() - before[0], sshd.sessions() - before[1], cpu_s() - cpu


_WORK = {("Delete", "Server"), ("Create", "Server"), ("Create", "Benchmark")}


def physical_work_s(engine_log: str) -> float:
    """Seconds the providers spent stopping the old server, starting the new one and benchmarking
    it, from the engine's verbose log (each call's "executing" and "success" lines)."""
    began: dict[tuple[str, str], float] = {}
    total_s = 0.0
    for line in engine_log.splitlines():
        if not line.startswith("{") or '"Provider[' not in line:
            continue
        entry = json.loads(line)
        message: str = entry["msg"]
        call = message.split("].", 1)[1].split("(", 1)[0]
        kind = message.split("(", 1)[1].split(")", 1)[0].rsplit("::", 1)[0].rsplit(":", 1)[-1]
        if (call, kind) not in _WORK:
            continue
        when = _seconds(entry["time"])
        if "executing" in message:
            began[(call, kind)] = when
        elif "success" in message and (call, kind) in began:
            total_s += when - began.pop((call, kind))
    return total_s


def _seconds(stamp: str) -> float:
    clock = stamp.rstrip("Z").split("T")[1]  # the same day: a benchmark run is minutes long
    hours, minutes, seconds = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def flag_change(sshd: SshServer, project: Workspace, stack: str) -> tuple[Timing, float]:
    """The `up` that applies a changed flag, and the physical work in it (stop, start, benchmark)."""
    before, started, cpu = (sshd.connections(), sshd.sessions()), time.monotonic(), cpu_s()
    # -v=7 logs each provider call; the log goes to a file, not the terminal, so it costs little.
    done = project.run("up", "--yes", "-s", stack, "-v=7", "--logflow", "--logtostderr")
    took = time.monotonic() - started
    timing = (took, sshd.connections() - before[0], sshd.sessions() - before[1], cpu_s() - cpu)
    return timing, physical_work_s(done.stderr)


def build_compiled_floor(folder: Path) -> Path | None:
    """The do-nothing provider plugin built into ``folder``; None (and why) without Go."""
    if shutil.which("go") is None:
        print("Go is not on PATH: the compiled floors are left out.", file=sys.stderr)
        return None
    source = Path(__file__).resolve().parent / "compiled_floor"
    binary = folder / "pulumi-resource-floor"
    subprocess.run(["go", "build", "-trimpath", "-o", str(binary), "."], cwd=source, check=True)
    return folder


def use_plugins(workspace: Workspace, plugins: Path) -> None:
    """Points the workspace's project file (a copy of the project's) at the compiled floor's plugin."""
    project_file = workspace.path / "Pulumi.yaml"
    text = project_file.read_text()
    project_file.unlink()
    project_file.write_text(f"{text}plugins:\n  providers:\n    - name: floor\n      path: {plugins}\n")


def floor_workspace(root: Path, name: str, program: str, plugins: Path | None) -> Workspace:
    """A workspace with ``program`` deployed as stack ``name``; with ``plugins``, the project file
    points the engine at the compiled floor's plugin there."""
    floor = Workspace.create(root / name)
    floor.use_program(program)
    if plugins is not None:
        use_plugins(floor, plugins)
    config = emulator_stack(port=free_port(), state_dir=root / name) if name == "spec-compiled" else ""
    floor.init_stack(name, config)
    floor.run("up", "--yes", "--skip-preview", "-s", name)
    return floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, start_sshd() as sshd:
        root = Path(tmp)
        proxy = DelayingProxy(sshd.port, 0.025)
        project = Workspace.create(root / "stacks")
        floors = {name: floor_workspace(root, name, program, None) for name, program in PROGRAMS.items()}
        plugins = build_compiled_floor(root / "plugins")
        if plugins is not None:
            for name, program in COMPILED.items():
                floors[name] = floor_workspace(root, name, program, plugins)
        try:
            rows, change = measure(sshd, proxy, project, floors, root, args.rounds)
        finally:  # the servers would outlive the benchmark's folder
            for stack in ("emulator", "loopback", "50ms"):
                project.run("destroy", "--yes", "--skip-preview", "-s", stack, check=False)
    report(rows, change, proxy.accepted, list(floors))


def measure(
    sshd: SshServer,
    proxy: DelayingProxy,
    project: Workspace,
    floors: dict[str, Workspace],
    root: Path,
    rounds: int,
) -> tuple[dict[str, list[Timing]], dict[str, tuple[Timing, float]]]:
    """Deploys the three stacks, then times the commands ``rounds`` times, interleaved."""
    rows: dict[str, list[Timing]] = defaultdict(list)
    emulator = emulator_stack(port=free_port(), state_dir=root / "emulator")
    project.init_stack("emulator", emulator.replace('"0.5.8"', f'"{RELEASE}"'))
    project.run("up", "--yes", "--skip-preview", "-s", "emulator")
    configs: dict[str, dict[str, Any]] = {}
    for name, port in (("loopback", sshd.port), ("50ms", proxy.port)):
        far = dataclasses.replace(sshd, port=port)
        configs[name] = ssh_config(far, root / name, port=free_port())
        configs[name]["sglang-stacks:environment"]["sglang_release"] = RELEASE
        new_stack(project, name, far, configs[name])
        project.run("up", "--yes", "--skip-preview", "-s", name)
    for _ in range(rounds):
        for name, floor in floors.items():
            rows[f"{name} preview"].append(timed(sshd, command(floor, "preview", "-s", name)))
            rows[f"{name} up"].append(timed(sshd, command(floor, "up", "--yes", "-s", name)))
        rows["emulator preview"].append(timed(sshd, command(project, "preview", "-s", "emulator")))
        for name in configs:
            rows[f"{name} preview"].append(timed(sshd, command(project, "preview", "-s", name)))
            rows[f"{name} up"].append(timed(sshd, command(project, "up", "--yes", "-s", name)))
    change: dict[str, tuple[Timing, float]] = {}
    for name, config in configs.items():
        config["sglang-stacks:server"]["cuda_graph_max_bs"] = 512
        write_config(project, name, config)
        change[name] = flag_change(sshd, project, name)
    return rows, change


def report(
    rows: dict[str, list[Timing]],
    change: dict[str, tuple[Timing, float]],
    proxied: int,
    floors: list[str],
) -> None:
    def median(name: str, column: int = 0) -> float:
        return statistics.median(timing[column] for timing in rows[name])

    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()}")
    print(
        "| command | host | sglang-stacks (s) | empty (s) | ratio | one dynamic resource (s) | ratio "
        "| SSH connections | SSH sessions |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for host in ("loopback", "50ms", "emulator"):
        for verb in ("preview", "up"):
            name = f"{host} {verb}"
            if name not in rows:
                continue
            ours, empty, dynamic = median(name), median(f"empty {verb}"), median(f"dynamic {verb}")
            opened = max(timing[1] for timing in rows[name])
            sessions = max(timing[2] for timing in rows[name])
            label = "up, nothing changed" if verb == "up" else "preview (refresh: always)"
            print(
                f"| {label} | {host} | {ours:.2f} | {empty:.2f} | {ours / empty:.2f}x | {dynamic:.2f} "
                f"| {ours / dynamic:.2f}x | {opened} | {sessions} |"
            )
    for host, ((took, opened, sessions, _), work_s) in change.items():
        print(
            f"| up after one flag change | {host} | {took:.2f} | physical work {work_s:.1f} "
            f"| overhead {took - work_s:.1f} s | | | {opened} | {sessions} |"
        )
    print(f"(the 50 ms proxy accepted {proxied} connections in all)")
    print()
    print("CPU seconds on this machine (medians; the commands' process trees):")
    print("| command | host | sglang-stacks | empty | ratio | one dynamic resource | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for host in ("loopback", "50ms", "emulator"):
        for verb in ("preview", "up"):
            name = f"{host} {verb}"
            if name not in rows:
                continue
            ours, empty, dynamic = (median(key, 3) for key in (name, f"empty {verb}", f"dynamic {verb}"))
            print(
                f"| {verb} | {host} | {ours:.2f} | {empty:.2f} | {ours / empty:.2f}x | {dynamic:.2f} "
                f"| {ours / dynamic:.2f}x |"
            )
    print()
    print("The floors (medians; ratios to the empty program's):")
    print("| program | preview (s) | ratio | no-op up (s) | ratio | CPU preview (s) | CPU up (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for floor in floors:
        preview, up = median(f"{floor} preview"), median(f"{floor} up")
        print(
            f"| {FLOOR_NAMES[floor]} | {preview:.2f} | {preview / median('empty preview'):.2f}x | {up:.2f} "
            f"| {up / median('empty up'):.2f}x | {median(f'{floor} preview', 3):.2f} "
            f"| {median(f'{floor} up', 3):.2f} |"
        )


if __name__ == "__main__":
    main()
