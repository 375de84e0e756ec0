"""A background process on this machine, owned by a stack: started on create, checked on refresh,
stopped on delete. The smallest real resource the engine can deploy end to end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import pulumi
import pulumi.dynamic as dynamic

STOP_TIMEOUT_S = 10.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its /proc status says it is gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _stop(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)


class _ProcessProvider(dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        log = open(props["log_path"], "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            child = subprocess.Popen(
                props["argv"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        finally:
            log.close()
        return dynamic.CreateResult(str(child.pid), {**props, "pid": child.pid})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [key for key in ("argv", "log_path") if olds.get(key) != news.get(key)]
        return dynamic.DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=True)

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        # A process that died is gone: refresh drops it from the state, and the next up starts it.
        if not _alive(int(props["pid"])):
            return dynamic.ReadResult(None, {})
        return dynamic.ReadResult(id_, props)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        _stop(int(props["pid"]))


class Process(dynamic.Resource, module="local", name="Process"):
    """A process started in its own session with output redirected to `log_path`."""

    pid: pulumi.Output[int]
    """The process id on this machine."""

    def __init__(
        self,
        name: str,
        argv: pulumi.Input[list[str]],
        log_path: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(_ProcessProvider(), name, {"argv": argv, "log_path": log_path, "pid": None}, opts)
