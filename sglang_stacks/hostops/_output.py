"""The last lines a host printed, as errors quote them: once as a field, once in the sentence."""

from __future__ import annotations

__all__ = ["last_lines", "said_last"]


def last_lines(text: str, lines: int = 5) -> str:
    """The last ``lines`` non-empty lines of ``text``, joined by `` | `` (empty when there are none)."""
    return " | ".join([line for line in text.strip().splitlines() if line.strip()][-lines:])


def said_last(last: str) -> str:
    """The sentence quoting `last_lines`' result."""
    return f"Last output: {last}." if last else "It printed nothing."
