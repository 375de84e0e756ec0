"""Every exit code of the ``sglang-stacks`` command, declared once.

0 fine; 1 the answer is no (render: the configuration has errors; compare: a stack is significantly
slower than the first beyond the tolerance; rollout: the stack regressed past its gate, or a
fleet's canary did; promote: nothing was written; recover: pending operations are left for the
user); 2 bad input, nothing launched; 3 (rollout) the update failed for another reason than its
gate; 130 (sweep run) interrupted: the same command resumes it.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode"]


class ExitCode(IntEnum):
    """A process exit code of the CLI. Several answers of "no" share 1, under their own names."""

    OK = 0
    """Done, nothing to report: passed, written, nothing left."""
    REGRESSION = 1
    """compare, rollout: a stack is significantly slower (a gate or a canary said so)."""
    CONFIG_ERRORS = 1
    """render: the configuration has errors (preflight or a bad ``--host``)."""
    NOT_WRITTEN = 1
    """promote: the stack file was left as it was."""
    LEFT_FOR_YOU = 1
    """recover: pending operations remain that this tool does not settle."""
    BAD_INPUT = 2
    """A flag, a stack file or a stack name is wrong; the message names it and the fix."""
    UPDATE_FAILED = 3
    """rollout: the update failed for another reason than its gate."""
    INTERRUPTED = 130
    """sweep run: stopped by Ctrl-C or a signal; the same command resumes it."""
