"""Runs in a fresh interpreter: builds one release's parser from its unpacked wheel, with stand-ins.

    python -S -E -O -c <bootstrap> <result.json> <release folder> [<helper folder> ...]

``-S`` keeps site-packages out, so every package but the release's own ``sglang`` and the helper
wheels is a stand-in, and the result does not depend on what happens to be installed here.
``-O`` skips ``assert`` statements: releases assert facts about the GPU at import time, which
describe the machine, not the parser. The result file holds the parser described as in a table,
and everything that says a stand-in may have shaped it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import traceback
from typing import Any

from sglang_flags import _inert, _standins
from sglang_flags.describe import describe_parser

_roots: list[tuple[str, str]] = []


def _short(text: str) -> str:
    """``text`` with this machine's folders replaced by what they are (``<stdlib>/typing.py``)."""
    for folder, label in _roots:
        text = text.replace(folder, label)
    return text


def _inert_paths(value: Any, where: str) -> list[str]:
    """Where a stand-in sits inside ``value`` (a default, a choices list, a converter)."""
    if _inert.is_inert(value):
        return [f"{where} is {value!r}"]
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _inert_paths(key, f"{where} key") + _inert_paths(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            found += _inert_paths(item, f"{where} element")
    return found


def stand_ins_in(parser: argparse.ArgumentParser) -> list[str]:
    """Every option value of ``parser`` that is or holds a stand-in, as ``--flag default is ...``."""
    found: list[str] = []
    for action in parser._actions:
        name = action.option_strings[0] if action.option_strings else action.dest
        for part in ("default", "choices", "type", "const"):
            found += _inert_paths(getattr(action, part), f"{name} {part}")
    return found


def build(release_dir: str) -> dict[str, Any]:
    """Import the release's ``server_args`` and describe the parser its ``add_cli_args`` builds."""
    finder = _standins.install(release_dir, protected=["sglang", "sglang_flags"])
    server_args = __import__("sglang.srt.server_args", fromlist=["ServerArgs"])
    builder = getattr(server_args.ServerArgs, "add_cli_args", None)
    if builder is None or _inert.is_inert(server_args.ServerArgs) or _inert.is_inert(builder):
        return {"refused": [f"ServerArgs.add_cli_args is {builder!r}: it is built by a stand-in package"]}
    parser = argparse.ArgumentParser(prog="launch_server.py")
    asked = _inert.questions()
    builder(parser)
    refused = stand_ins_in(parser) + [f"add_cli_args asked the {question}" for question in asked]
    return {
        "flags": describe_parser(parser),
        "refused": [_short(reason) for reason in refused],
        "stand_in_modules": sorted(finder.served),
    }


def main(argv: list[str]) -> int:
    """Build the parser of the release folder ``argv[1]`` and write the result to ``argv[0]``."""
    out, release_dir, helpers = argv[0], argv[1], argv[2:]
    _roots.extend((os.path.join(folder, ""), "") for folder in [release_dir, *helpers])
    _roots.append((os.path.join(sysconfig.get_paths()["stdlib"], ""), "<stdlib>/"))
    _roots.append((os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ""), ""))
    sys.path[:0] = [release_dir, *helpers]
    try:
        result = build(release_dir)
    except BaseException as error:  # anything the release raises is a reason to refuse it
        # The release's own line is the one to read; the stand-in or stdlib frame below it is not.
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(release_dir)]
        where = f"{_short(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"
        result = {"refused": [_short(f"importing it raised {type(error).__name__}: {error} (at {where})")]}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0
