"""A problem of a configuration and its fix, as preflight and the flag renderer report it (a
`Finding`), and the shape of a preflight rule."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sglang_stacks.config.spec import StackSpec

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """One problem and its fix: how bad, a stable code, the config key it is about, what and the fix.
    Preflight's rules report them, and so does the flag renderer (`render.flag_problems`)."""

    severity: Severity
    """``error`` stops the launch; ``warning`` is shown and recorded; ``info`` explains."""
    code: str
    """Stable identifier of the rule, like ``memory-does-not-fit``."""
    key: str
    """The stack key it is about, as ``section.field`` (``server.mem_fraction_static``)."""
    message: str
    """What preflight found, as sentences."""
    fix: str
    """What to change, as a sentence (may be empty for an info)."""

    def sentence(self) -> str:
        """The finding on one line."""
        return f"[{self.severity}] {self.key}: {self.message} {self.fix}"


Rule = Callable[["StackSpec", str], Iterable[Finding]]
"""A preflight rule: the findings for a spec launched with a release."""


def error(code: str, key: str, message: str, fix: str) -> Finding:
    """A finding that stops the launch."""
    return Finding("error", code, key, message, fix)


def warning(code: str, key: str, message: str, fix: str) -> Finding:
    """A finding that is shown and recorded."""
    return Finding("warning", code, key, message, fix)


def info(code: str, key: str, message: str, fix: str = "") -> Finding:
    """A finding that explains."""
    return Finding("info", code, key, message, fix)
