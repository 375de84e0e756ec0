"""The local cluster's one error."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """The cluster could not be started or reached: the message says what failed, with the log
    lines of the program that failed, and what to do."""
