"""How the project's errors reach the user through Pulumi: a provider's as sentences, without a Python
traceback or class name, with their typed record for the driver (and what every provider call starts
with: the watch on the engine, the cancel hook); the program's without the engine's echo of a
failure it already reported."""

from __future__ import annotations

import sys
from typing import Any

from sglang_stacks.errors import StacksError, records_wanted
from sglang_stacks.hostops import cancel, lifetime
from sglang_stacks.resources.engine_status import engine_address

__all__ = ["MONITOR_GONE", "sentences_only", "without_the_monitors_echo"]

MONITOR_GONE = "Resource monitor has terminated, shutting down"
"""What Pulumi's Python runtime reports when the engine ended the update (a resource failed) while
the program still waited on it: a second error that only echoes the resource's own."""


def without_the_monitors_echo() -> None:
    """In the program, drops `MONITOR_GONE` from the errors it reports: the resource's error that
    ended the update says what failed and what to do, once."""
    import pulumi

    report = pulumi.log.error
    if getattr(report, "drops_the_echo", False):
        return

    def error(msg: str, *args: Any, **kwargs: Any) -> None:
        if msg != MONITOR_GONE:
            report(msg, *args, **kwargs)

    error.drops_the_echo = True  # type: ignore[attr-defined]
    pulumi.log.error = error


class sentences_only:
    """The project's own errors (a StacksError already says what to fix) reach the user without a
    Python traceback: Pulumi's provider host prints `traceback.format_exc()`, which honours
    `sys.tracebacklimit`. The process serves one update, which fails here anyway. For a driver
    (`sglang_stacks.errors.records_wanted`) the error leaves with its typed record as a note (PEP
    678), which the printed traceback shows after the message for the driver to read back, while the
    message itself stays the sentence, on a line after the error's class."""

    def __enter__(self) -> None:
        # Whatever a provider does on a host ends with the update that asked for it, and stops when
        # its user cancels the update.
        lifetime.watch_engine()
        cancel.listen()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, *_: object) -> None:
        if isinstance(error, StacksError):
            sys.tracebacklimit = 0
            line = error.record().line()
            if records_wanted() and line not in getattr(error, "__notes__", ()):
                error.add_note(line)
            # In a provider process, its sentence starts on a line of its own: the engine's progress
            # rows show a failed resource's first line (twice: as it fails, and failed), so they name
            # the error's class and the diagnostics at the end say the sentence, once.
            if engine_address() and error.args and not str(error.args[0]).startswith("\n"):
                error.args = ("\n" + str(error.args[0]), *error.args[1:])
            # Those rows name the failure in words, not as a Python class.
            error.__class__ = _shown_as(type(error), str(error.cause))


_SHOWN: dict[tuple[type[StacksError], str], type[StacksError]] = {}


def _shown_as(kind: type[StacksError], cause: str) -> type[StacksError]:
    """``kind`` under the name a traceback prints for it: what failed, in words (``gate failure``),
    not a module and class. It stays ``kind`` for everything else."""
    if kind.__module__ == "builtins":
        return kind
    if (kind, cause) not in _SHOWN:
        words = f"{cause.replace('_', ' ')} failure"
        _SHOWN[kind, cause] = type(kind.__name__, (kind,), {"__module__": "builtins", "__qualname__": words})
    return _SHOWN[kind, cause]
