"""What the fault drills share: a workspace on the emulator host (or a test sshd), updates started in
the background to be interrupted, and the checks every drill ends with: the servers on the port,
the tool's processes left on this side, the host's claim.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sglang_stacks.hostops import claim
from sglang_stacks.hostops.connection import Connection
from tests._pulumi import Workspace, emulator_stack, free_port, pulumi_binary

# A benchmark long enough to be interrupted (about 2 s per request on the emulator).
LONG_BENCHMARK = (
    "  sglang-stacks:benchmark:\n"
    "    input_len: 32\n"
    "    output_len: 160\n"
    "    warmup_requests: 1\n"
    "    repetitions: 3\n"
    "    requests_per_repetition: 1\n"
)


def stack_config(
    port: int,
    state: Path,
    *,
    host: str | None = None,
    benchmark: str = "",
    faults: str = "",
    **more: str,
) -> str:
    """A stack file's ``config:`` on the drill's host, its benchmark replaced by ``benchmark``, with
    the emulator's ``faults`` (YAML lines under ``faults:``)."""
    text = emulator_stack(port=port, state_dir=state, **more, **({"host": host} if host else {}))
    if faults:
        scale = "      time_scale: 0.002\n"
        text = text.replace(scale, f"{scale}      faults:\n{faults}")
    if benchmark:
        start = text.index("  sglang-stacks:benchmark:\n")
        end = text.index("  sglang-stacks:launch:\n")
        text = text[:start] + benchmark + text[end:]
    return text


@dataclass
class Drill:
    """A workspace whose stacks share one host state folder."""

    workspace: Workspace
    state: Path

    @property
    def host_state(self) -> str:
        return str(self.state / "host")

    def add_stack(
        self, stack: str, *, benchmark: str = "", faults: str = "", host: str | None = None, **more: str
    ) -> int:
        """Creates ``stack`` serving on a port of its own; returns the port. ``more``: the other
        sections of `tests._pulumi.emulator_stack` (``server``, ``draft``, ``extra``)."""
        port = free_port()
        config = stack_config(port, self.state, host=host, benchmark=benchmark, faults=faults, **more)
        self.workspace.init_stack(stack, config)
        return port

    def start(self, *args: str, group: bool = False) -> subprocess.Popen[str]:
        """``pulumi <args>`` in the background, its output kept for the assertion messages; with
        ``group``, in a process group of its own, as a terminal's foreground job is."""
        return subprocess.Popen(
            [pulumi_binary(), *args, "--non-interactive"],
            cwd=self.workspace.path,
            env=self.workspace.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            process_group=0 if group else None,
        )

    def up_until_pending(
        self, stack: str, resource: str, timeout_s: float = 180, *, group: bool = False
    ) -> subprocess.Popen[str]:
        """`pulumi up` of ``stack`` in the background, returned once the state records the operation
        on ``resource`` (its name) as pending: the engine writes that down before it asks the
        provider, and drops it when the provider answers, so a kill now interrupts exactly that
        step. Its output is read on, and kept, by a thread; AssertionError with it when the update
        ends first."""
        update = self.start("up", "--yes", "--skip-preview", "-s", stack, group=group)
        said: list[str] = []
        assert update.stdout is not None
        threading.Thread(target=said.extend, args=(update.stdout,), daemon=True).start()
        checkpoint = self.workspace.backend / ".pulumi" / "stacks" / "sglang-stacks" / f"{stack}.json"
        deadline = time.monotonic() + timeout_s
        while not _pending_in(checkpoint, resource):
            if update.poll() is not None or time.monotonic() > deadline:
                update.kill()
                raise AssertionError(f"{resource} never became pending:\n{''.join(said)}")
            time.sleep(0.02)
        return update

    def up(self, stack: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.workspace.run("up", "--yes", "--skip-preview", "-s", stack, check=check)

    def claim(self, conn: Connection | None = None) -> claim.Claim | None:
        return claim.read(conn or Connection.local(), state_dir=self.host_state)

    def tool_processes(self) -> list[str]:
        """Processes of this workspace's updates on this machine (the CLI, language host, program,
        provider and its wrapper, SSH clients, a local load generator), servers excepted."""
        marker = f"PULUMI_BACKEND_URL=file://{self.workspace.backend}".encode()
        found = []
        for pid in _pids():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                args = _cmdline(pid)
            except OSError:
                continue
            if marker in environ.split(b"\0") and "sglang_emulator" not in args:
                found.append(f"{pid}: {args}")
        return found


def _pending_in(checkpoint: Path, resource: str) -> bool:
    """Whether a local backend's state file records an operation on ``resource`` as pending."""
    try:
        latest = json.loads(checkpoint.read_text())["checkpoint"].get("latest") or {}
    except (OSError, ValueError, KeyError):
        return False  # not written yet, or being written
    pending = latest.get("pending_operations") or []
    return any(op["resource"]["urn"].endswith(f"::{resource}") for op in pending)


@dataclass(frozen=True)
class Proc:
    """A process as seen once: its pid and start time (pids are reused), and its command line."""

    pid: int
    start_ticks: int
    args: str

    def alive(self) -> bool:
        try:
            return _start_ticks(self.pid) == self.start_ticks
        except OSError:
            return False


def process_tree(root: int) -> list[Proc]:
    """The processes descending from ``root`` (children, their children, ...), as they are now."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            try:
                found.append(Proc(child, _start_ticks(child), _cmdline(child)))
            except OSError:
                continue
    return found


def kill_tree(root: int) -> None:
    """Kills -9 ``root`` and every process descending from it at once, as a crash of the machine
    would: each is stopped first, so none can start another or notice the others end."""
    stopped: set[int] = set()
    while True:
        found = {root} | {proc.pid for proc in process_tree(root)}
        if found <= stopped:
            break
        for pid in found - stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= found
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


ENGINE_ADDRESS = re.compile(r"-m pulumi\.dynamic (\S+)")


def engine_addresses(tree: list[Proc]) -> set[str]:
    """The engine addresses the provider processes of ``tree`` were started with."""
    return {found.group(1) for proc in tree if (found := ENGINE_ADDRESS.search(proc.args))}


def _start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19])


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) != os.getpid()]


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()


def processes(*needles: str) -> list[int]:
    """Pids of processes whose command line holds every one of ``needles``."""
    found = []
    for pid in _pids():
        try:
            args = _cmdline(pid)
        except OSError:
            continue
        if args and all(needle in args for needle in needles):
            found.append(pid)
    return found


def servers(port: int) -> list[int]:
    """The emulated SGLang servers listening on ``port``."""
    return processes("sglang_emulator", f"--port {port}")


def loadgens(port: int) -> list[int]:
    """The load generators aimed at the server on ``port``."""
    return processes("-m loadgen", f"--url=http://127.0.0.1:{port}")


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def wait_for(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}")
        time.sleep(0.2)


def interrupt(update: subprocess.Popen[str], sig: signal.Signals) -> None:
    """Sends ``sig`` to the ``pulumi`` CLI alone (its plugins are not told)."""
    os.kill(update.pid, sig)


def ctrl_c(update: subprocess.Popen[str], times: int = 1) -> None:
    """What a terminal's Ctrl-C does to an update started with ``group``: SIGINT to every process of
    its process group (the CLI, its plugins, the program, what they started), ``times`` times."""
    for _ in range(times):
        os.killpg(update.pid, signal.SIGINT)
        time.sleep(0.3)


def finish(update: subprocess.Popen[str], timeout_s: float = 120) -> str:
    """The update's output once it has ended."""
    output, _ = update.communicate(timeout=timeout_s)
    return output
