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
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from control_plane_report import report
from pulumi_floors import COMPILED, PROGRAMS, build_compiled_floor, floor_workspace
from pulumi_timing import Timing, command, flag_change, timed

from tests._pulumi import Workspace, emulator_stack, free_port
from tests.sshd import SshServer, start_sshd
from tests.test_deployment import new_stack, ssh_config, write_config

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


if __name__ == "__main__":
    main()
