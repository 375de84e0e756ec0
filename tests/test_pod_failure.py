"""A pod that fails to start is named with what its failed run printed, even when the kubelet
restarts the container between the status the tool read and the log it reads (the full suite once
showed "(its log is empty)" for a draft model's check whose run had said why)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sglang_stacks.errors import ArtifactError
from sglang_stacks.kube import pods
from sglang_stacks.kube.draft import DRAFT_CHECK

SAID = "the draft model at /models/eagle3 has links to files outside it, which the pod does not see"


def _pod(state: Any, last: Any) -> Any:
    status = SimpleNamespace(
        name=DRAFT_CHECK, image="img", state=state, last_state=SimpleNamespace(terminated=last)
    )
    return SimpleNamespace(
        metadata=SimpleNamespace(name="server-abc"),
        spec=SimpleNamespace(node_name="127.0.0.1", volumes=[]),
        status=SimpleNamespace(init_container_statuses=[status], container_statuses=[]),
    )


@pytest.mark.parametrize("restarted_into", ["the next run", "backoff"])
def test_a_failed_runs_log_is_read_from_the_run_that_printed_it(
    monkeypatch: pytest.MonkeyPatch, restarted_into: str
) -> None:
    failed = SimpleNamespace(exit_code=6)
    if restarted_into == "the next run":  # read as terminated, restarted before the log read
        pod, printed_in_previous = _pod(SimpleNamespace(waiting=None, terminated=failed), None), True
    else:  # read as waiting after the failed run, whose log is still the current one
        pod = _pod(
            SimpleNamespace(waiting=SimpleNamespace(reason="CrashLoopBackOff"), terminated=None), failed
        )
        printed_in_previous = False

    def log(access: Any, name: str, *, previous: bool = False, **which: Any) -> str:
        return SAID if previous == printed_in_previous else ""

    monkeypatch.setattr(pods, "pod_log", log)

    access: Any = SimpleNamespace(namespace="ns")  # the log is read by the stand-in above
    error = pods._container_failure(access, pod, "SGLang (Deployment/x)")

    assert isinstance(error, ArtifactError)
    assert SAID in str(error) and "(its log is empty)" not in str(error)
