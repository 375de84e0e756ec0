"""Rebuild a flag table from an installed SGLang by building its real parser.

Run it with the Python of an environment where SGLang is installed:

    python -m sglang_flags.regenerate                  # writes sglang_flags/tables/<version>.json
    python -m sglang_flags.regenerate --output -       # prints the table instead

It calls ``ServerArgs.add_cli_args`` on a fresh argparse parser, exactly as
``sglang.launch_server`` does, and records every option: spellings, dest, type name, choices,
default, nargs and action class. Stdlib only, like the rest of the package.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

TABLES = Path(__file__).resolve().parent / "tables"


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


def build_table() -> dict[str, Any]:
    """The table of the SGLang installed in this interpreter."""
    # Imported here, by name: only this script needs SGLang, and only where it is installed.
    server_args = importlib.import_module("sglang.srt.server_args")

    version = metadata.version("sglang")
    parser = argparse.ArgumentParser(prog="launch_server.py")
    server_args.ServerArgs.add_cli_args(parser)
    return {
        "sglang_version": version,
        "source": (
            f"argparse parser built by sglang.srt.server_args.ServerArgs.add_cli_args "
            f"from the sglang=={version} wheel"
        ),
        "flags": describe_parser(parser),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rebuild a flag table from the installed SGLang.")
    parser.add_argument(
        "--output",
        help="file to write, or - for stdout (default: sglang_flags/tables/<version>.json)",
    )
    args = parser.parse_args(argv)
    try:
        table = build_table()
    except ImportError as error:
        print(
            f"error: SGLang is not importable here ({error}). Run this with SGLang's Python.", file=sys.stderr
        )
        return 2
    text = json.dumps(table, indent=1) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    target = Path(args.output) if args.output else TABLES / f"{table['sglang_version']}.json"
    target.write_text(text, encoding="utf-8")
    print(f"wrote {len(table['flags'])} flags of SGLang {table['sglang_version']} to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
