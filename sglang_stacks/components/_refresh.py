"""What a refresh of a host's stack reads: the modules of its providers, imported together when the
first read arrives (`TypedProvider.gathers_with`), so that the other reads, each waiting to unpickle
its provider, reach the transport's `gathering` within milliseconds and share one session to the host."""

from __future__ import annotations

__all__ = ["FLEET_READS", "HOST_READS"]

_PACKAGE = __name__.rpartition(".")[0]
HOST_READS = tuple(
    f"{_PACKAGE}.{name}" for name in ("host", "environment", "draft_model", "server", "benchmark")
)
"""The provider modules every host of a stack has (`_host_parts`, the benchmark)."""
FLEET_READS = (*HOST_READS, f"{_PACKAGE}.router", f"{_PACKAGE}.canary")
"""A fleet's: its hosts', its router's and its canary gate's."""
