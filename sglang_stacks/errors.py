"""Every error sglang-stacks raises on purpose, in one hierarchy, and the typed record that carries
one across Pulumi's engine.

StacksError                  base: a sentence saying what went wrong and how to fix it
├── SpecError                a stack file or config value is malformed (names the key)
├── FlagError                a launch flag is unknown to, or renamed in, the target release
├── PreflightError           the configuration is knowably doomed on this host
├── HostError                the GPU host cannot be reached, or differs from its declared facts
│   ├── ClaimError           another stack holds, or is taking, this host's GPUs
│   ├── SchedulingError      a Kubernetes cluster leaves a server's pod Pending (the scheduler's reason)
│   └── UpdateCancelledError the update was cancelled (Ctrl-C) while a step ran on the host
├── ArtifactError            the draft model is missing or does not match its manifest
├── ServerError              SGLang did not become ready (its `Cause`: out_of_memory, bad_flag, nccl, ...)
│   └── ServingError         SGLang failed while benchmarked (crash, out_of_memory, hang, error_responses)
├── RouterError              SGLang's router did not start, or would not add or drain a worker
├── PulumiError              Pulumi failed with an error of its own (a live update's lock, a failed cancel)
└── BenchmarkError           the post-deploy benchmark failed
    ├── GateError            the regression gate could not judge the result
    └── RegressionError      a result is slower than its baseline's past the gate's tolerance
        └── CanaryRegressionError   a fleet's canary is slower than a replica on the current configuration

Code recognises a failure by its type and fields, never by its words. A provider raises in its own
process and the program in the language host; the driver (``rollout``, a sweep) only sees the
Pulumi CLI's text. So at those two edges the error's message is followed by one line,
``sglang-stacks-failure: {...}``, the JSON of its `FailureRecord`, and `failure_from_output` reads
it back into the exception type with its fields. Only a driver reads that line: it asks for it by
setting `RECORDS_ENV` in the environment of the ``pulumi`` it runs (which Pulumi passes on to the
program and the providers), and a ``pulumi up`` typed by an operator shows the sentence alone.
"""

from __future__ import annotations

import os
from typing import ClassVar

from pydantic import ConfigDict, ValidationError

from sglang_stacks.causes import Cause
from sglang_stacks.shape import Shape

# fmt: off
__all__ = [
    "FAILURE_TAG", "RECORDS_ENV", "ArtifactError", "BenchmarkError", "CanaryRegressionError", "Cause",
    "ClaimError", "FailureRecord", "FlagError", "GateError", "HostError", "PreflightError", "PulumiError",
    "RegressionError", "RouterError", "SchedulingError", "ServerError", "ServingError", "SpecError",
    "StacksError", "UpdateCancelledError", "failure_from_output", "failures_from_output", "records_wanted",
]
# fmt: on

FAILURE_TAG = "sglang-stacks-failure:"
"""What starts the line of an error's record in a message that crossed the engine."""

RECORDS_ENV = "SGLANG_STACKS_FAILURE_RECORDS"
"""Set to ``1`` by a driver in the environment of the ``pulumi`` it runs: the program and the
providers then follow each error's message with its record's tagged line."""


def records_wanted() -> bool:
    """Whether the ``pulumi`` this process runs under was started by a driver that reads records."""
    return os.environ.get(RECORDS_ENV) == "1"


class FailureRecord(Shape):
    """One error as it crosses Pulumi's engine: its class in this module and its fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    error: str
    """The class's name, e.g. ``ServerError``."""
    cause: Cause
    """What kind of failure it is."""
    summary: str
    """The first sentence, without the output attached to it (a server's log lines). The whole
    message is the text the record follows; the record does not repeat it."""
    stack: str | None = None
    """The stack whose update raised it, when known."""
    last_output: str | None = None
    """HostError: the host's last output lines before a session ended."""
    measurements: str | None = None
    """RegressionError: what was measured, as the verdict says it (``tok/s 40.1 against 88.0 ...``)."""
    scheduler_message: str | None = None
    """SchedulingError: the Kubernetes scheduler's own message (``0/1 nodes are available: ...``)."""

    def line(self) -> str:
        """The tagged line that follows the message."""
        return f"{FAILURE_TAG} {self.model_dump_json(exclude_none=True)}"


class StacksError(Exception):
    """Base of every deliberate error; its message is whole sentences ending with the fix. Only its
    subclasses are raised: each names its kind of failure."""

    cause: ClassVar[Cause]
    """The kind of failure the class stands for; a ServerError's instances have their own."""

    def __init__(self, message: str, *, stack: str | None = None, summary: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.stack = stack
        """The stack whose update failed, when the raiser knows it."""
        self.summary = summary or message.split("\n", 1)[0]
        """The first sentence, without attached output."""

    def record(self) -> FailureRecord:
        """The typed record of this error, which `failure_from_output` turns back into it."""
        fields = {name: getattr(self, name, None) for name in _EXTRA_FIELDS}
        return FailureRecord(
            error=type(self).__name__,
            cause=self.cause,
            summary=self.summary,
            stack=self.stack,
            **fields,
        )

    def with_record(self) -> str:
        """What the program says when the error crosses the engine: the message, followed by the
        record's tagged line when a driver asked for records (`records_wanted`)."""
        return f"{self.message}\n{self.record().line()}" if records_wanted() else self.message


class SpecError(StacksError):
    """A stack file or config value is malformed."""

    cause = Cause.SPEC


class FlagError(StacksError):
    """A launch flag is unknown to, or has no rendering for, the target SGLang release."""

    cause = Cause.FLAG


class PreflightError(StacksError):
    """Preflight found errors that would make the launch fail."""

    cause = Cause.PREFLIGHT


class HostError(StacksError):
    """The GPU host is unreachable or does not match its declared facts."""

    cause = Cause.HOST

    def __init__(
        self, message: str, *, stack: str | None = None, summary: str | None = None, last_output: str = ""
    ) -> None:
        super().__init__(message, stack=stack, summary=summary)
        self.last_output = last_output or None
        """What the host printed last before the session ended (its last lines), when anything."""


class ClaimError(HostError):
    """The host's GPUs are claimed by another stack, or two updates raced for them."""

    cause = Cause.CLAIM


class SchedulingError(HostError):
    """A Kubernetes cluster leaves a server's pod Pending: no node has the GPUs free, or no node
    matches its selector. The scheduler's own message says which."""

    cause = Cause.SCHEDULING

    def __init__(
        self, message: str, *, scheduler_message: str, stack: str | None = None, summary: str | None = None
    ) -> None:
        super().__init__(message, stack=stack, summary=summary)
        self.scheduler_message = scheduler_message
        """What the scheduler said about the pod (its ``PodScheduled`` condition or last event)."""


class UpdateCancelledError(HostError):
    """The update was cancelled by its user (Ctrl-C) while a step ran on a host; what the step ran
    there was stopped with it (`hostops.cancel`)."""


class ArtifactError(StacksError):
    """A draft-model artifact is missing or corrupt."""

    cause = Cause.ARTIFACT


class ServerError(StacksError):
    """The SGLang server failed to start or to become ready."""

    def __init__(
        self, message: str, *, cause: Cause, stack: str | None = None, summary: str | None = None
    ) -> None:
        super().__init__(message, stack=stack, summary=summary)
        self.cause = cause  # type: ignore[misc]  # each server failure has its own class of cause


class ServingError(ServerError):
    """The SGLang server failed while it was being benchmarked: it exited (``crash``, or a class its
    log makes recognisable, e.g. ``out_of_memory``), stopped answering (``hang``), or answered with
    errors (``error_responses``). The benchmark's own faults (its client, its connection) are
    BenchmarkErrors."""


class RouterError(StacksError):
    """SGLang's router (sglang-router) failed to start, or to add, list or drain a worker."""

    cause = Cause.ROUTER


class PulumiError(StacksError):
    """Pulumi itself stands in the way: a live update holds the stack's lock, or a command of its own
    failed (``pulumi cancel``)."""

    cause = Cause.PULUMI


class BenchmarkError(StacksError):
    """The benchmark could not run, or its numbers are no measure of the server."""

    cause = Cause.BENCHMARK


class GateError(BenchmarkError):
    """The regression gate could not judge a result (its baseline has no comparable one)."""

    cause = Cause.GATE


class RegressionError(BenchmarkError):
    """A result is slower than its reference beyond the tolerance: the regression gate's verdict
    against the baseline stack (and, as `CanaryRegressionError`, a fleet's canary's)."""

    cause = Cause.GATE

    def __init__(
        self, message: str, *, measurements: str, stack: str | None = None, summary: str | None = None
    ) -> None:
        super().__init__(message, stack=stack, summary=summary)
        self.measurements = measurements
        """What was measured, as the verdict says it: ``tok/s 40.1 against 88.0 (-54.4 %, ...)``."""


class CanaryRegressionError(RegressionError):
    """A fleet's canary is slower than a replica on the current configuration beyond the rollout's
    tolerances: the update stops before the other hosts, and ``rollout`` rolls the canary back."""

    cause = Cause.CANARY


_EXTRA_FIELDS = ("last_output", "measurements", "scheduler_message")
"""The record's fields that only some classes have, read from the instance."""


def _classes(base: type[StacksError] = StacksError) -> dict[str, type[StacksError]]:
    found = {base.__name__: base}
    for sub in base.__subclasses__():
        if sub.__module__ != "builtins":  # not a provider's name for it in words
            found.update(_classes(sub))
    return found


def _from_record(record: FailureRecord) -> StacksError:
    kind = _classes().get(record.error)
    said, common = record.summary, {"stack": record.stack, "summary": record.summary}
    if kind is None or kind is StacksError:  # a class of another version: its record names the cause
        unknown = StacksError(said, **common)
        unknown.cause = record.cause  # type: ignore[misc]  # the record's, as the class is not known here
        return unknown
    if issubclass(kind, RegressionError):
        return kind(said, measurements=record.measurements or "", **common)
    if issubclass(kind, ServerError):
        return kind(said, cause=record.cause, **common)
    if issubclass(kind, SchedulingError):
        return kind(said, scheduler_message=record.scheduler_message or "", **common)
    if issubclass(kind, HostError):
        return kind(said, last_output=record.last_output or "", **common)
    return kind(said, **common)


def failures_from_output(text: str) -> list[StacksError]:
    """Every error whose record ``text`` holds (Pulumi's output of an update, a diagnostic), in
    order, each once; the errors of other tools are not in it."""
    found: list[StacksError] = []
    seen: set[str] = set()
    for line in text.splitlines():
        _, tag, rest = line.partition(FAILURE_TAG)
        if not tag or rest.strip() in seen:
            continue
        try:
            record = FailureRecord.model_validate_json(rest.strip())
        except ValidationError:
            continue  # a line cut by the terminal, or another tool's text
        seen.add(rest.strip())
        found.append(_from_record(record))
    return found


def failure_from_output(text: str) -> StacksError | None:
    """The first error of sglang-stacks whose record ``text`` holds, as its exception type with its
    fields (its message is the record's summary), or None when the text holds none (Pulumi's own
    failure, a crash)."""
    found = failures_from_output(text)
    return found[0] if found else None
