"""An argparse parser as a table: every option's spellings, dest, type, choices, default, nargs, action.

The same description serves a release's real parser (an installed SGLang) and one built from its
wheel with stand-ins, so tables from either are compared field by field.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["describe_parser"]


def _json_value(value: Any) -> Any:
    """A default or choice as JSON: containers element-wise, anything else JSON lacks as its str."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_json_value(v) for v in value), key=str)
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


def _type_name(converter: Any) -> str | None:
    if converter is None:
        return None
    return str(getattr(converter, "__name__", type(converter).__name__))


def describe_parser(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Every option of ``parser`` in declaration order, in the table's JSON shape."""
    flags = []
    for action in parser._actions:
        if not action.option_strings:
            continue  # SGLang's server parser has no positionals; nothing to render for one
        choices = action.choices
        if isinstance(choices, set | frozenset):
            # A set's order is its hash order, which changes from process to process.
            choices = sorted(choices, key=str)
        flags.append(
            {
                "flags": list(action.option_strings),
                "dest": action.dest,
                "type": _type_name(action.type),
                "choices": None if choices is None else [_json_value(c) for c in choices],
                "default": _json_value(action.default),
                "nargs": action.nargs,
                "action": type(action).__name__,
            }
        )
    return flags
