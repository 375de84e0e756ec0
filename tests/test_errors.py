"""Failures cross Pulumi's engine as typed records: the driver reads back the exception type and
its fields from the CLI's text, never the words of the message."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from sglang_stacks import errors
from sglang_stacks.campaign.trial import TrialFailure, classify
from sglang_stacks.errors import (
    CanaryRegressionError,
    Cause,
    ClaimError,
    HostError,
    PreflightError,
    RegressionError,
    SchedulingError,
    ServerError,
    StacksError,
    failure_from_output,
    failures_from_output,
)


@pytest.fixture(autouse=True)
def _a_driver_asked_for_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read the records back as a driver does, which asks for them."""
    monkeypatch.setenv(errors.RECORDS_ENV, "1")


def _every_class(base: type[StacksError] = StacksError) -> list[type[StacksError]]:
    return [base, *(found for sub in base.__subclasses__() for found in _every_class(sub))]


def _example(kind: type[StacksError]) -> StacksError:
    message = f"A {kind.__name__} happened.\nIts detail, on the next line. Fix it and run again."
    if issubclass(kind, RegressionError):
        return kind(message, measurements="tok/s 40.1 against 88.0 (-54.4 %, tolerance 5 %)", stack="s")
    if issubclass(kind, ServerError):
        return kind(
            message, cause=Cause.OUT_OF_MEMORY, stack="s", summary="SGLang on x exited (out_of_memory)."
        )
    if issubclass(kind, SchedulingError):
        return kind(
            message, scheduler_message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.", stack="s"
        )
    if issubclass(kind, HostError):
        return kind(message, last_output="ssh: connect | Connection reset", stack="s")
    return kind(message, stack="s")


def _as_pulumi_prints_it(error: StacksError) -> str:
    """An update's output with the error of a provider in it, as the engine shows a diagnostic."""
    said = f"sglang_stacks.errors.{type(error).__name__}: {error.with_record()}"
    indented = "\n".join(f"    {line}" for line in said.splitlines())
    return (
        "Updating (s):\n  pulumi:pulumi:Stack sglang-stacks-s running\n"
        f"  sglang:index:Server (s-server):\n    error: {indented.lstrip()}\n"
        "Resources:\n    3 unchanged\n"
    )


@pytest.mark.parametrize("kind", _every_class()[1:], ids=lambda kind: kind.__name__)
def test_every_error_is_read_back_from_pulumis_output_as_its_type_with_its_fields(
    kind: type[StacksError],
) -> None:
    raised = _example(kind)

    found = failure_from_output(_as_pulumi_prints_it(raised))

    assert type(found) is kind
    assert found is not None and found.record() == raised.record()
    assert (found.message, found.cause, found.stack) == (raised.summary, raised.cause, raised.stack)
    # The record is one line and does not repeat the message it follows.
    assert raised.with_record().count("\n") == raised.message.count("\n") + 1
    assert "Its detail, on the next line" not in raised.record().line()


def test_a_failure_reads_back_as_its_own_class_after_a_provider_in_the_process_showed_one() -> None:
    """A provider names a failure in words (``host failure``) under a subclass of the same name; an
    error read back later in that process is still the hierarchy's class (CI found this by order)."""
    from sglang_stacks.resources.provider_errors import sentences_only

    shown = HostError("ssh: connect to host refused.", last_output="refused", stack="s")
    with pytest.raises(HostError), sentences_only():
        raise shown
    assert type(shown) is not HostError and type(shown).__name__ == "HostError"

    found = failure_from_output(_as_pulumi_prints_it(_example(HostError)))

    assert type(found) is HostError


def test_the_fields_of_a_failure_travel_with_it() -> None:
    server = failure_from_output(_as_pulumi_prints_it(_example(ServerError)))
    canary = failure_from_output(_as_pulumi_prints_it(_example(CanaryRegressionError)))
    host = failure_from_output(_as_pulumi_prints_it(_example(ClaimError)))

    assert isinstance(server, ServerError) and server.cause == "out_of_memory"
    assert server.summary == "SGLang on x exited (out_of_memory)."
    assert isinstance(canary, RegressionError) and canary.cause == "canary"
    assert canary.measurements == "tok/s 40.1 against 88.0 (-54.4 %, tolerance 5 %)"
    assert isinstance(host, HostError) and host.last_output == "ssh: connect | Connection reset"
    pending = failure_from_output(_as_pulumi_prints_it(_example(SchedulingError)))
    assert isinstance(pending, SchedulingError)
    assert pending.scheduler_message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_output_without_a_record_names_no_failure_and_a_cut_record_is_skipped() -> None:
    cut = PreflightError("Preflight found 1 error(s).").with_record()[:-10]
    pulumis_own = "error: update failed\nerror: preview failed: resource 'x' is locked"

    assert failure_from_output(pulumis_own) is None
    assert failure_from_output(cut) is None
    # Words alone never make a failure, whatever they say.
    assert failure_from_output("error: Preflight found 1 error(s); the canary regressed: gate") is None


def test_the_same_record_printed_twice_is_one_failure_in_order_of_appearance() -> None:
    claim = ClaimError("The GPUs of x belong to stack 'a'.")
    server = ServerError("SGLang on x exited before it became ready (nccl).", cause=Cause.NCCL)
    # The engine prints a diagnostic where it happens and again in the summary at the end.
    text = "\n".join([claim.with_record(), server.with_record(), claim.with_record()])

    assert [type(e).__name__ for e in failures_from_output(text)] == ["ClaimError", "ServerError"]


def test_a_trial_is_classified_by_the_type_and_fields_of_its_failure() -> None:
    server = ServerError(
        "SGLang on the local host exited before it became ready (nccl). Last log lines of /l:\nNCCL WARN",
        cause=Cause.NCCL,
        summary="SGLang on the local host exited before it became ready (nccl).",
    )
    gate = RegressionError("s ran at 40.0 tok/s, beyond the 5 % tolerance.", measurements="tok/s 40.0")

    assert classify(_as_pulumi_prints_it(server)) == TrialFailure(
        Cause.NCCL, "SGLang on the local host exited before it became ready (nccl)."
    )
    assert classify(_as_pulumi_prints_it(gate)).cause == "gate"
    assert classify(_as_pulumi_prints_it(PreflightError("Preflight found 2 error(s)."))).cause == "preflight"
    assert classify(_as_pulumi_prints_it(ClaimError("The claim lock stayed taken."))).cause == "claim"
    # A failure of Pulumi's own (no record) is named so, with its last error line and where its
    # whole output is.
    own = classify("error: one\nerror: update failed\n", log="reports/c/logs/c-1.log")
    assert own == TrialFailure(
        Cause.PULUMI,
        "Pulumi failed the update with an error of its own; fix what it names (its whole output is in "
        'reports/c/logs/c-1.log): "error: update failed"',
    )
    # One that names no error at all (killed, say) by its exit code and its last lines.
    killed = classify("Updating (c-1):\n +  sglang:index:Server c-1-server creating (3s)\n", exit_code=137)
    assert killed.cause == Cause.PULUMI
    assert killed.message.startswith(
        "pulumi up ended with exit code 137 and named no error; fix what it names"
    )
    assert killed.message.endswith(
        'Its last lines: "Updating (c-1): / +  sglang:index:Server c-1-server creating (3s)"'
    )


def test_the_hierarchy_the_docstring_draws_is_the_one_the_module_has() -> None:
    drawn = {word for word in (errors.__doc__ or "").split() if word.endswith("Error")}
    assert drawn == {kind.__name__ for kind in _every_class()}


def test_every_cause_a_failure_carries_is_one_of_the_one_enum() -> None:
    from sglang_stacks.errors import FailureRecord, _classes
    from sglang_stacks.hostops import server_failure
    from sglang_stacks.hostops.failure_fixes import LogCause

    classes = [kind for kind in _classes().values() if not issubclass(kind, ServerError)]
    assert {type(kind.cause) for kind in classes if kind is not StacksError} == {Cause}
    # Each class is named: "other" is only in records an earlier version saved. A server's error
    # names how it ended, always.
    assert Cause.OTHER not in {kind.cause for kind in classes if kind is not StacksError}
    assert inspect.signature(ServerError).parameters["cause"].default is inspect.Parameter.empty
    assert {type(cause) for cause in server_failure._CAUSES.values()} == {Cause}
    assert set(server_failure._CAUSES) == set(get_args(LogCause))  # every cause a log names has one
    with pytest.raises(ValidationError, match="cause"):
        FailureRecord.model_validate({"error": "ServerError", "cause": "out of memory", "summary": "s"})


def test_no_failure_of_this_version_is_unnamed() -> None:
    # The package raises only the classes below the base, each with its cause, and never gives a
    # failure the cause only earlier versions' records hold ("(other)" in what a user reads).
    package = Path(errors.__file__).parent
    unnamed = []
    for module in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.expr):
                continue
            base = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "StacksError"
            )
            other = isinstance(node, ast.Attribute) and node.attr == "OTHER"
            if (base and module.name != "errors.py") or (other and module.name != "causes.py"):
                unnamed.append(f"{module.relative_to(package)}:{node.lineno}")
    assert unnamed == []


def test_a_record_of_a_class_this_version_does_not_know_keeps_its_cause() -> None:
    record = errors.FailureRecord(error="FutureError", cause=Cause.HANG, summary="It hung.")

    found = failure_from_output(record.line())

    assert found is not None and (found.cause, found.summary) == (Cause.HANG, "It hung.")


def test_the_programs_error_carries_its_record_only_for_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    error = errors.SpecError("sglang-stacks:server.port: expected an integer. Set it to 30000.")

    monkeypatch.setenv(errors.RECORDS_ENV, "1")
    driven = error.with_record()
    monkeypatch.delenv(errors.RECORDS_ENV)
    typed = error.with_record()

    assert isinstance(failure_from_output(driven), errors.SpecError)
    assert typed == error.message and errors.FAILURE_TAG not in typed
