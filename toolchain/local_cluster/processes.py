"""Starting the cluster's programs and waiting for them: each one in the cluster's cgroup (see
cgroups.py), in its own session, its output in ``<folder>/logs/<name>.log``."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolchain.local_cluster.errors import ClusterError

# Joins the cgroup whose cgroup.procs file is $0, then becomes the program: everything the program
# starts is in that cgroup from its first instruction on.
_JOIN_CGROUP = 'echo $$ > "$0" && exec "$@"'
LOG_TAIL_LINES = 40


@dataclass
class Program:
    """A started program of the cluster."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines it printed."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def check_running(self) -> None:
        """A ClusterError with its last log lines if it has exited."""
        code = self.process.poll()
        if code is not None:
            raise ClusterError(
                f"{self.name} exited ({code}) while the cluster started; its log ends:\n{self.tail()}"
            )


def start(
    name: str,
    argv: Sequence[str],
    *,
    folder: Path,
    cgroup_procs: Path,
    env: Mapping[str, str] | None = None,
    mount_namespace_of: int | None = None,
) -> Program:
    """Start ``argv`` in the cgroup whose ``cgroup.procs`` is ``cgroup_procs``; with
    ``mount_namespace_of``, in the mount namespace of that process."""
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{name}.log"
    command = list(argv)
    if mount_namespace_of is not None:
        command = ["nsenter", f"--target={mount_namespace_of}", "--mount", "--", *command]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            ["sh", "-c", _JOIN_CGROUP, str(cgroup_procs), *command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=folder,
            start_new_session=True,
        )
    return Program(name, process, log_path)


def wait_until(
    what: str,
    ready: Callable[[], bool],
    *,
    watch: Sequence[Program],
    timeout_s: float,
    interval_s: float = 0.1,
) -> None:
    """Poll ``ready`` until it is true; a ClusterError when a watched program exits first or the
    time runs out (naming ``what`` and the programs' last log lines)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for program in watch:
            program.check_running()
        if ready():
            return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {program.name}:\n{program.tail()}" for program in watch)
            raise ClusterError(f"{what} did not happen within {timeout_s:g} s; the logs end:\n{tails}")
        time.sleep(interval_s)
