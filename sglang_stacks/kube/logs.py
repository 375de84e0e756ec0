"""What ``sglang-stacks logs`` shows of a stack on a cluster: the logs of its pods (a server's is
SGLang's own output; a fleet's router's; the benchmark Job's, its progress lines as sentences), read
through the Kubernetes client, once or followed as they grow.

A new launch is a new pod: a follower looks for the stack's pods every second and follows each new
one from its first line, so ``logs -f`` started before ``pulumi up`` shows the new server from its
start, as on an SSH host.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sglang_loadgen.progress import LINE_PREFIX
from sglang_stacks.hostops.logs import describe_progress
from sglang_stacks.kube.client import ClusterAccess, api_error_text
from sglang_stacks.kube.pods import pod_log
from sglang_stacks.kube.workloads import MANAGED_BY, STACK_LABEL

if TYPE_CHECKING:
    from sglang_stacks.config.kube import ClusterSpec

__all__ = ["StackPod", "follow", "print_logs", "show", "stack_pods"]

_ROLES = {"sglang": "server", "sglang-router": "router", "sglang-benchmark": "benchmark"}
_POLL_S = 1.0


@dataclass(frozen=True)
class StackPod:
    """One pod of a stack: its name, what it runs, when it was made."""

    name: str
    role: str
    """``server``, ``router`` or ``benchmark``."""
    created: float

    @property
    def header(self) -> str:
        return f"==> {self.role} pod {self.name} <=="


def stack_pods(access: ClusterAccess, stack: str) -> list[StackPod]:
    """The stack's pods in its namespace: servers, then the router, then benchmarks, oldest first."""
    from sglang_stacks.errors import HostError

    selector = ",".join(f"{key}={value}" for key, value in {**MANAGED_BY, STACK_LABEL: stack}.items())
    try:
        items = access.core().list_namespaced_pod(
            access.namespace, label_selector=selector, _request_timeout=30
        )
    except HostError:
        raise
    except Exception as error:
        raise HostError(
            f"{access.label} did not list the pods of stack {stack} ({api_error_text(error)}). Check that "
            "the cluster runs and the kubeconfig's user may read pods and their logs."
        ) from None
    found = [
        StackPod(
            item.metadata.name,
            _ROLES.get((item.metadata.labels or {}).get("app.kubernetes.io/name", ""), "pod"),
            item.metadata.creation_timestamp.timestamp(),
        )
        for item in items.items
        if item.metadata.deletion_timestamp is None
    ]
    order = list(_ROLES.values())
    return sorted(found, key=lambda pod: (order.index(pod.role) if pod.role in order else 9, pod.created))


def _readable(line: str) -> str | None:
    """A log line as shown: progress lines as sentences; a benchmark's document (its outputs hold it)
    left out."""
    if line.startswith("{") and not line.startswith(LINE_PREFIX):
        return None
    return describe_progress(line)


def show(access: ClusterAccess, stack: str, lines: int = 40) -> list[str]:
    """The last ``lines`` of each of the stack's pods' logs, each under a header naming the pod."""
    shown: list[str] = []
    for pod in stack_pods(access, stack):
        shown.append(pod.header)
        found = (_readable(line) for line in pod_log(access, pod.name, lines=lines).splitlines())
        shown += [line for line in found if line is not None]
    if not shown:
        shown.append(f"Stack {stack} has no pod in namespace {access.namespace} of {access.label}.")
    return shown


def _stream(
    access: ClusterAccess, stack: str, pod: StackPod, lines: int | None, out: queue.Queue[str]
) -> None:
    """Puts each line of ``pod``'s log into ``out`` as it comes, once its container has started,
    until the pod ends."""
    while True:
        try:
            response: Any = access.core().read_namespaced_pod_log(
                pod.name, access.namespace, follow=True, tail_lines=lines, _preload_content=False
            )
            break
        except Exception:  # not started yet, or gone: look again while the pod is there
            if pod.name not in {p.name for p in stack_pods(access, stack)}:
                return
            time.sleep(_POLL_S)
    pending = b""
    for chunk in response.stream():
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            line = _readable(raw.decode(errors="replace"))
            if line is not None:
                out.put(f"[{pod.name}] {line}")


def follow(access: ClusterAccess, stack: str, emit: Callable[[str], None], lines: int = 40) -> None:
    """Prints the last ``lines`` of each pod of the stack and then every new line, each new pod's from
    its first, until interrupted (Ctrl-C)."""
    out: queue.Queue[str] = queue.Queue()
    followed: set[str] = set()
    first = True
    try:
        while True:
            for pod in stack_pods(access, stack):
                if pod.name not in followed:
                    followed.add(pod.name)
                    tail = lines if first else None
                    threading.Thread(
                        target=_stream, args=(access, stack, pod, tail, out), daemon=True
                    ).start()
            first = False
            deadline = time.monotonic() + _POLL_S
            while (left := deadline - time.monotonic()) > 0:
                try:
                    emit(out.get(timeout=left))
                except queue.Empty:
                    break
    except KeyboardInterrupt:
        return


def print_logs(cluster: ClusterSpec, stack: str, *, following: bool, lines: int) -> None:
    """``sglang-stacks logs`` of a stack on ``cluster``: its pods' last ``lines``, or followed."""
    access = ClusterAccess.of(cluster)
    if following:
        follow(access, stack, lambda line: print(line, flush=True), lines)
    else:
        print("\n".join(show(access, stack, lines)))
