"""The kinds of failure an error carries (`Cause`): each error class's own, and for a server how it
ended. `sglang_stacks.errors` gives every error its cause from here; a failure's record, a trial's
classified cause and the server failure classes name them. `cause_text` is a saved cause as a user
reads it.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Cause", "cause_text"]


class Cause(StrEnum):
    """What kind of failure an error is: its class's own, or, for a server, how it ended."""

    OTHER = "other"
    """Only in records an earlier version saved (a campaign's failed trials): no failure of this
    version carries it, and `cause_text` says what it stood for."""
    SPEC = "spec"
    FLAG = "flag"
    PREFLIGHT = "preflight"
    HOST = "host"
    CLAIM = "claim"
    SCHEDULING = "scheduling"
    """A Kubernetes cluster left a server's pod Pending."""
    ARTIFACT = "artifact"
    ROUTER = "router"
    BENCHMARK = "benchmark"
    GATE = "gate"
    CANARY = "canary"
    PULUMI = "pulumi"
    """Pulumi failed with an error of its own (its engine, a plugin, the state, a lock, the program's
    own exception), or its command ended with no error at all: no failure of this tool's."""
    DRIVER = "driver"
    """``sweep run``'s own step around a trial's update failed (writing its stack file, reading its
    outputs): a Python exception outside Pulumi's update."""
    OUT_OF_MEMORY = "out_of_memory"
    """A server ran out of GPU memory (starting, or while serving)."""
    BAD_FLAG = "bad_flag"
    """A server's release refused a launch flag."""
    NCCL = "nccl"
    """A server's collective communication failed (NCCL, or a multi-node rendezvous)."""
    UNSUPPORTED_GPU = "unsupported_gpu"
    """A kernel a flag selects does not support the host's GPU."""
    PYTHON_MISSING = "python_missing"
    """A server's Python is not on the host any more."""
    PORT_IN_USE = "port_in_use"
    """Another process holds a server's port."""
    GPU_MEMORY_HELD = "gpu_memory_held"
    """Other processes hold the GPU memory a server needs: before its launch (named by pid), or
    still after its server was stopped."""
    CRASH = "crash"
    """A server exited (starting, or while benchmarked) for a reason its log does not name."""
    START_TIMEOUT = "start_timeout"
    """A server was not ready within ``launch.ready_timeout_s`` and was stopped, its log naming no
    cause (still loading, or hung: the phase its log stopped at says where)."""
    HANG = "hang"
    """A server still runs but stopped answering while it was benchmarked."""
    ERROR_RESPONSES = "error_responses"
    """A server answered requests of the benchmark with errors."""


_EARLIER: dict[str, str] = {
    Cause.OTHER: "unclassified (recorded by an earlier version; its message says why)",
}
"""Causes only earlier versions saved, as a user reads them."""


def cause_text(cause: str | None) -> str:
    """A saved cause (a trial's, kept as text) as a user reads it: its name, or for a cause only an
    earlier version wrote, what it stood for."""
    if cause is None:
        return "unknown"
    return _EARLIER.get(cause, cause)
