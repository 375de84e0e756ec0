"""The type of a launch flag's value, apart from the flag tables: the server's provider needs only
this, and a provider process should not pay for building the tables' models."""

from __future__ import annotations

FlagValue = str | int | float | bool | list[str | int | float]
"""A flag's value: a switch (bool), a scalar, or a list for nargs flags."""
