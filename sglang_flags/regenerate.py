"""Rebuild flag tables from SGLang's own parser, per release, without installing SGLang.

    python -m sglang_flags.regenerate 0.5.8 0.5.23        # those releases, from their wheels
    python -m sglang_flags.regenerate --since 0.5.1       # every release pip lists from 0.5.1 on
    python -m sglang_flags.regenerate 0.5.8 --output -    # print one table, write nothing
    python -m sglang_flags.regenerate --installed         # the SGLang installed in this Python

From a wheel: ``pip download --no-deps`` into the cache (``wheels.py``), then the release's own
``ServerArgs.add_cli_args`` builds the parser in a child interpreter where the heavy packages are
stand-ins (``build.py``). A release whose parser a stand-in could have shaped is refused with the
reasons and gets no table. Tables and ``tables/index.json`` are rewritten together (``store.py``).
Installed: the real parser of the SGLang in this interpreter, as before wheels were read.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from sglang_flags import release_key
from sglang_flags.build import Built, build_from_wheel
from sglang_flags.describe import describe_parser
from sglang_flags.store import TABLES, store_tables
from sglang_flags.wheels import WheelError, default_cache

__all__ = ["build_table", "describe_parser", "list_releases", "main"]


def build_table() -> dict[str, Any]:
    """The table of the SGLang installed in this interpreter."""
    # Imported here, by name: only this mode needs SGLang, and only where it is installed.
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


def list_releases(since: str) -> list[str]:
    """Every SGLang release ``pip index versions sglang`` lists, from ``since`` on, oldest first."""
    command = [sys.executable, "-m", "pip", "index", "versions", "sglang", "--disable-pip-version-check"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = re.search(r"Available versions: (.+)", done.stdout)
    if done.returncode != 0 or found is None:
        said = done.stderr.strip() or done.stdout.strip()
        raise WheelError(f"pip could not list SGLang's releases: {said}")
    releases = []
    for name in found.group(1).split(", "):
        try:
            if release_key(name) >= release_key(since):
                releases.append(name)
        except ValueError:
            continue  # release candidates and dev builds: not what users pin
    return sorted(releases, key=release_key)


def _installed(output: str | None) -> int:
    try:
        table = build_table()
    except ImportError as error:
        print(
            f"error: SGLang is not importable here ({error}). Run this with SGLang's Python, "
            f"or name releases to build from their wheels.",
            file=sys.stderr,
        )
        return 2
    if output is not None:
        _write(output, table)
        return 0
    store_tables({table["sglang_version"]: table["flags"]}, {})
    print(f"SGLang {table['sglang_version']}: {len(table['flags'])} flags, tables and index written")
    return 0


def _write(output: str, table: dict[str, Any]) -> None:
    text = json.dumps(table, indent=1) + "\n"
    if output == "-":
        sys.stdout.write(text)
    else:
        Path(output).write_text(text, encoding="utf-8")


def _report(built: Built) -> None:
    if built.flags is not None:
        print(f"SGLang {built.release}: {len(built.flags)} flags in {built.seconds:.1f} s", file=sys.stderr)
        return
    print(f"SGLang {built.release}: refused, no table written:", file=sys.stderr)
    for reason in built.refused:
        print(f"  - {reason}", file=sys.stderr)


def _from_wheels(releases: list[str], cache: Path, output: str | None, tables: Path) -> int:
    results: list[Built] = []
    for release in releases:
        try:
            built = build_from_wheel(release, cache)
        except WheelError as error:
            print(f"error: SGLang {release}: {error}", file=sys.stderr)
            return 2
        _report(built)
        results.append(built)
    tables_built = {b.release: b.flags for b in results if b.flags is not None}
    refused = {b.release: b.refused for b in results if b.flags is None}
    if output is not None:
        for release, flags in tables_built.items():
            _write(output, {"sglang_version": release, "flags": flags})
    else:
        shipped = store_tables(tables_built, refused, tables)
        print(f"{len(shipped)} releases ship a table ({len(set(shipped.values()))} distinct), in {tables}")
    return 1 if refused else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_flags.regenerate",
        description="Rebuild SGLang flag tables from each release's own parser.",
    )
    parser.add_argument("releases", nargs="*", help="releases to build from their wheels, e.g. 0.5.8")
    parser.add_argument("--since", help="every release pip lists from this one on, e.g. 0.5.1")
    parser.add_argument("--installed", action="store_true", help="the SGLang installed in this Python")
    parser.add_argument("--cache", type=Path, default=None, help="wheel cache (default: %(default)s)")
    parser.add_argument("--output", help="print (-) or write one table instead of the shipped tables")
    parser.add_argument("--tables", type=Path, default=TABLES, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; exit 0 when every release built, 1 when some were refused, 2 on errors."""
    parser = _parser()
    parser.set_defaults(cache=default_cache())
    args = parser.parse_args(argv)
    if args.installed or not (args.releases or args.since):
        return _installed(args.output)
    releases = list(args.releases)
    if args.since:
        try:
            releases += list_releases(args.since)
        except WheelError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.output is not None and len(releases) != 1:
        parser.error("--output takes exactly one release")
    return _from_wheels(sorted(set(releases), key=release_key), args.cache, args.output, args.tables)


if __name__ == "__main__":
    sys.exit(main())
