"""A server pod watched until it is ready, and each way it may not be, named: Pending (with the
scheduler's own message), an image the node cannot get, SGLang exiting (classified from the pod's log
as over SSH), a draft model other than the one declared, or no readiness (SGLang's
``/health_generate``, the pod's readiness probe) in time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sglang_stacks.errors import Cause, HostError, SchedulingError, ServerError
from sglang_stacks.hostops.server_failure import classify_failure
from sglang_stacks.kube.client import ClusterAccess, api_error_text
from sglang_stacks.kube.draft import (
    DRAFT_CHECK,
    draft_failure,
    draft_unmounted,
    failed_draft_mount,
    mounts_draft,
)

__all__ = ["ReadyPod", "find_ready", "pod_log", "restart_failed", "wait_ready"]

_POLL_S = 1.0
_TAIL_LINES = 30
# Waiting reasons of a container whose image the node cannot get.
_IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName")


@dataclass(frozen=True)
class ReadyPod:
    """A pod that passed its readiness probe."""

    name: str
    uid: str
    ip: str
    """Its address: the node's own on the host network."""
    node: str


def _condition(pod: Any, kind: str) -> Any:
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def _live(pods: list[Any]) -> list[Any]:
    """Pods not on their way out, newest first."""
    alive = [pod for pod in pods if pod.metadata.deletion_timestamp is None]
    return sorted(alive, key=lambda pod: pod.metadata.creation_timestamp, reverse=True)


def pod_log(
    access: ClusterAccess,
    pod: str,
    *,
    previous: bool = False,
    lines: int | None = None,
    container: str | None = None,
) -> str:
    """The pod's log (its server's output, or ``container``'s), or of the container's previous run;
    "" when none."""
    try:
        # Raw bytes: left to the client, a log that is one JSON document (the load generator's) comes
        # back as the repr of the dict it parses it into.
        response = access.core().read_namespaced_pod_log(
            pod,
            access.namespace,
            previous=previous,
            tail_lines=lines,
            **({"container": container} if container else {}),
            _request_timeout=30,
            _preload_content=False,
        )
    except Exception:  # a container that never ran has no log: the caller says what happened
        return ""
    return bytes(response.data or b"").decode(errors="replace")


def _ready(pod: Any) -> ReadyPod | None:
    ready = _condition(pod, "Ready")
    if ready is None or ready.status != "True":
        return None
    return ReadyPod(pod.metadata.name, pod.metadata.uid, pod.status.pod_ip or "", pod.spec.node_name or "")


def find_ready(access: ClusterAccess, selector: str) -> ReadyPod | None:
    """A ready pod of ``selector`` now, or None (what a refresh asks)."""
    try:
        pods = access.core().list_namespaced_pod(
            access.namespace, label_selector=selector, _request_timeout=30
        )
    except Exception as error:
        raise HostError(f"{access.label} did not list pods ({api_error_text(error)}).") from None
    return next((found for pod in _live(pods.items) if (found := _ready(pod)) is not None), None)


def _unschedulable(pod: Any) -> str | None:
    scheduled = _condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable":
        return str(scheduled.message or "the scheduler gave no message")
    return None


def _has_failed(pod: Any) -> bool:
    """Whether one of ``pod``'s containers (init containers included) ended its last run failing."""
    statuses = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
    ended = [status.state.terminated or status.last_state.terminated for status in statuses]
    return any(end is not None and end.exit_code != 0 for end in ended)


def _unmounted(access: ClusterAccess, pods: list[Any]) -> dict[str, str]:
    """Of ``pods``, those waiting for a draft model folder their node does not have: pod name -> what
    the kubelet says (its ``FailedMount`` event)."""
    waiting = {pod.metadata.name for pod in pods if mounts_draft(pod) and pod.status.phase == "Pending"}
    if not waiting:
        return {}
    events = access.core().list_namespaced_event(
        access.namespace, field_selector="involvedObject.kind=Pod,reason=FailedMount", _request_timeout=30
    )
    return {
        event.involved_object.name: str(event.message)
        for event in events.items
        if event.involved_object.name in waiting and failed_draft_mount(event)
    }


def restart_failed(access: ClusterAccess, selector: str) -> list[str]:
    """Deletes the pods of ``selector`` whose containers failed, or whose draft model folder was not
    on their node, and that are not ready (their controller starts new ones); their names. A new
    ``pulumi up`` of an unchanged launch whose pod failed (a crash, a draft model missing or not the
    one declared) then judges a pod started after whatever was fixed on the node, not the old pod's
    failure, as a relaunch over SSH does."""
    try:
        listed = access.core().list_namespaced_pod(
            access.namespace, label_selector=selector, _request_timeout=30
        )
        live = _live(listed.items)
        unmounted = _unmounted(access, live)
        failed = [
            pod.metadata.name
            for pod in live
            # One that serves again stays.
            if (_has_failed(pod) or pod.metadata.name in unmounted) and _ready(pod) is None
        ]
        for name in failed:
            access.core().delete_namespaced_pod(name, access.namespace, _request_timeout=30)
    except Exception as error:
        raise HostError(f"{access.label} did not list or delete pods ({api_error_text(error)}).") from None
    return failed


def _failed_run_log(access: ClusterAccess, pod: Any, previous: bool, **which: Any) -> str:
    """The log of a container's failed run: of the run the status named, else of the other one."""
    name = pod.metadata.name
    return pod_log(access, name, previous=previous, **which) or pod_log(
        access, name, previous=not previous, **which
    )


def _container_failure(access: ClusterAccess, pod: Any, what: str) -> Exception | None:
    """The error of a pod whose container cannot start or exited, or None while it may still start."""
    for status in [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]:
        waiting, last = status.state.waiting, status.last_state.terminated
        if waiting is not None and waiting.reason in _IMAGE_REASONS:
            return HostError(
                f"{what} cannot start: its node cannot get image {status.image!r} ({waiting.reason}: "
                f"{waiting.message or 'no message'}). Import the image into the node's container runtime "
                "or push it where the nodes pull from, and check sglang-stacks:host.cluster.image."
            )
        terminated = status.state.terminated or (last if waiting is not None else None)
        if terminated is not None and terminated.exit_code != 0:
            previous = status.state.terminated is None
            # The kubelet may restart the container between the status read and the log read: the
            # run that failed is then the previous one (or, the other way, the current one).
            if status.name == DRAFT_CHECK:
                said = _failed_run_log(access, pod, previous, container=DRAFT_CHECK)
                return draft_failure(what, pod, terminated.exit_code, said)
            log = _failed_run_log(access, pod, previous, lines=_TAIL_LINES)
            failure = classify_failure(log)
            summary = f"{what} exited before it became ready (exit {terminated.exit_code}, {failure.kind})."
            shown = log.rstrip() or "(the log is empty)"
            return ServerError(
                f"{summary} Last lines of `kubectl logs -n {access.namespace} {pod.metadata.name}"
                f"{' --previous' if previous else ''}`:\n{shown}\n{failure.fix}",
                cause=failure.kind,
                summary=summary,
            )
    return None


def wait_ready(
    access: ClusterAccess,
    selector: str,
    *,
    what: str,
    schedule_timeout_s: float,
    ready_timeout_s: float,
) -> ReadyPod:
    """Waits for a pod of ``selector`` (one launch of a server) to pass its readiness probe.

    SchedulingError with the scheduler's message once one has stayed unschedulable for
    ``schedule_timeout_s``; HostError for an image the node cannot get; ArtifactError for a draft model
    not on the node or not the one declared; ServerError, classified from
    its log, when the server exits or is not ready within ``ready_timeout_s``.
    """
    started = time.monotonic()
    pending_since: float | None = None
    pod: Any = None
    while True:
        try:
            pods = _live(
                access.core()
                .list_namespaced_pod(access.namespace, label_selector=selector, _request_timeout=30)
                .items
            )
        except HostError:
            raise
        except Exception as error:
            raise HostError(
                f"{access.label} stopped answering while {what} started ({api_error_text(error)}). Once it "
                "answers, `pulumi up` checks the server again."
            ) from None
        pod = pods[0] if pods else None
        if pod is not None:
            found = _ready(pod)
            if found is not None:
                return found
            failed = _container_failure(access, pod, what)
            if failed is not None:
                raise failed
            unmounted = _unmounted(access, [pod]).get(pod.metadata.name)
            if unmounted is not None:
                raise draft_unmounted(what, pod, unmounted)
            reason = _unschedulable(pod)
            if reason is None:
                pending_since = None
            elif pending_since is None:
                pending_since = time.monotonic()
            if (
                reason is not None
                and pending_since is not None
                and time.monotonic() - pending_since >= schedule_timeout_s
            ):
                raise SchedulingError(
                    f'{what} stayed Pending for {schedule_timeout_s:g} s: the scheduler says "{reason}". '
                    "Free the GPUs another workload holds, lower tp_size or host.cluster.gpus_per_pod, or "
                    "fix host.cluster.node_selector / gpu_product; the pod stays Pending until the cluster "
                    "can place it (`pulumi destroy` removes it).",
                    scheduler_message=reason,
                )
        if time.monotonic() - started >= ready_timeout_s:
            log = pod_log(access, pod.metadata.name, lines=_TAIL_LINES) if pod is not None else ""
            summary = (
                f"{what} was not ready within {ready_timeout_s:g} s (its readiness probe is "
                "/health_generate)."
            )
            raise ServerError(
                f"{summary} Last log lines:\n{log.rstrip() or '(no log)'}\nIf the log shows it still "
                "loading, raise launch.ready_timeout_s; otherwise fix what its last lines name.",
                cause=Cause.START_TIMEOUT,
                summary=summary,
            )
        time.sleep(_POLL_S)
