"""How long the everyday Pulumi commands take against a deployed stack, next to an empty Pulumi
program (one export) on the same CLI and backend, and how many SSH connections each opens.

Runs a real sshd on 127.0.0.1 (the tests' fixture) in front of the SGLang emulator, and the same
sshd behind a TCP proxy that delays every chunk by 25 ms each way (a host 50 ms away; the kernel
here has no netem). Commands run interleaved, ``--rounds`` times; medians are printed with their
ratio to the empty program's. The one-flag change is printed with the work it cannot avoid
(stop, start, benchmark: its time minus a no-op `up`'s), so the rest is the control plane's.

Run: ``. .venv/sglang-stacks.env && python benchmarks/control_plane.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
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


def timed(sshd: SshServer, action: Callable[[], object]) -> tuple[float, int]:
    """Seconds ``action`` took and the SSH connections sshd accepted meanwhile."""
    before, started = sshd.connections(), time.monotonic()
    action()
    return time.monotonic() - started, sshd.connections() - before


def flag_change(sshd: SshServer, project: Workspace, stack: str) -> tuple[float, int, float]:
    """Seconds and SSH connections of the `up` that applies a changed flag, and its floor: the
    old server's stop, the new one's start and the benchmark, as the next no-op `up` does none of
    them, estimated as this `up` minus that one's time."""
    before, started = sshd.connections(), time.monotonic()
    project.run("up", "--yes", "-s", stack)
    took, opened = time.monotonic() - started, sshd.connections() - before
    started = time.monotonic()
    project.run("up", "--yes", "-s", stack)
    return took, opened, took - (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, int]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp, start_sshd() as sshd:
        root = Path(tmp)
        proxy = DelayingProxy(sshd.port, 0.025)
        project, empty = Workspace.create(root / "stacks"), Workspace.create(root / "empty")
        empty.use_program(EMPTY_PROGRAM)
        empty.init_stack("empty")
        project.init_stack("emulator", emulator_stack(port=free_port(), state_dir=root / "emulator"))
        project.run("up", "--yes", "--skip-preview", "-s", "emulator")
        configs: dict[str, dict[str, Any]] = {}
        for name, port in (("loopback", sshd.port), ("50ms", proxy.port)):
            far = dataclasses.replace(sshd, port=port)
            configs[name] = ssh_config(far, root / name, port=free_port())
            new_stack(project, name, far, configs[name])
            project.run("up", "--yes", "--skip-preview", "-s", name)
        for _ in range(args.rounds):
            rows["empty preview"].append(timed(sshd, command(empty, "preview", "-s", "empty")))
            rows["empty up"].append(timed(sshd, command(empty, "up", "--yes", "-s", "empty")))
            rows["emulator preview"].append(timed(sshd, command(project, "preview", "-s", "emulator")))
            for name in configs:
                rows[f"{name} preview"].append(timed(sshd, command(project, "preview", "-s", name)))
                rows[f"{name} up"].append(timed(sshd, command(project, "up", "--yes", "-s", name)))
        change: dict[str, tuple[float, int, float]] = {}
        for name, config in configs.items():
            config["sglang-stacks:server"]["cuda_graph_max_bs"] = 512
            write_config(project, name, config)
            change[name] = flag_change(sshd, project, name)
    report(rows, change, proxy.accepted)


def report(
    rows: dict[str, list[tuple[float, int]]], change: dict[str, tuple[float, int, float]], proxied: int
) -> None:
    def median(name: str) -> float:
        return statistics.median(took for took, _ in rows[name])

    print("| command | host | sglang-stacks (s) | empty program (s) | ratio | SSH connections |")
    print("| --- | --- | --- | --- | --- | --- |")
    for host in ("loopback", "50ms", "emulator"):
        for verb in ("preview", "up"):
            name = f"{host} {verb}"
            if name not in rows:
                continue
            ours, theirs = median(name), median(f"empty {verb}")
            opened = max(count for _, count in rows[name])
            label = "up, nothing changed" if verb == "up" else "preview (refresh: always)"
            print(f"| {label} | {host} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f}x | {opened} |")
    for host, (took, opened, floor) in change.items():
        print(f"| up after one flag change | {host} | {took:.2f} | work {floor:.1f} | - | {opened} |")
    print(f"(the 50 ms proxy accepted {proxied} connections in all)")


if __name__ == "__main__":
    main()
