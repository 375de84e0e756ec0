"""The load generator's contract: `Workload`, the settings of `settings` (the stack's benchmark
keys, declared once there) and what only the script takes, as its command line
(``request_timeout_s`` is ``--request-timeout-s``); how it ends (`LoadgenExit`). The document it
prints is `document`'s.

Standard library only: the project imports it to build the command line and to read the
document, without the HTTP client that runs the benchmark.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any

from .settings import WorkloadSettings, about, field_problem, workload_problem

__all__ = ["LoadgenError", "LoadgenExit", "Workload", "parse_args"]


class LoadgenError(Exception):
    """Every request failed, or the workload is malformed; the message says what to change."""


class LoadgenExit(IntEnum):
    """How ``python -m loadgen`` ends."""

    MEASURED = 0
    """It printed its document on stdout."""
    FAILED = 1
    """A `LoadgenError`: a sentence on stderr says what to change."""
    USAGE = 2
    """argparse refused the command line (an option this script does not know)."""
    EVERY_REQUEST_FAILED = 3
    """Every measured request of a level failed: it stopped at that level and printed its document
    all the same (how each request failed), with a sentence on stderr."""


def _flag(name: str) -> str:
    """The script's option for a field: ``request_timeout_s`` is ``--request-timeout-s``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Workload(WorkloadSettings):
    """A stack's workload as the script runs it: the settings, and where to send them."""

    url: str = field(default="http://127.0.0.1:30000", metadata=about("The server's base URL."))
    progress_file: str = field(
        default="", metadata=about("Append one JSON line per finished repetition to this file.")
    )

    @classmethod
    def from_settings(cls, url: str, settings: Mapping[str, Any]) -> Workload:
        """The workload of a stack's benchmark section; keys that are no option here are left out."""
        values: dict[str, Any] = {"url": url}
        for option in fields(cls):
            if option.name in settings and settings[option.name] is not None:
                values[option.name] = _typed_like(option.default, settings[option.name])
        return cls(**values)

    def argv(self) -> list[str]:
        """The script's command line that describes this workload."""
        argv = []
        for option in fields(self):
            value, flag = getattr(self, option.name), _flag(option.name)
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag.removeprefix("--"))
            else:
                text = ",".join(f"{v:g}" for v in value) if isinstance(value, tuple) else str(value)
                argv.append(f"{flag}={text}")
        return argv

    def check(self) -> None:
        """Raise ``LoadgenError`` naming the first setting that cannot describe a workload: a field
        past its limits, a value outside its choices, or fields that disagree."""
        for option in fields(self):
            problem = field_problem(option.name, getattr(self, option.name), option.type, option.metadata)
            if problem:
                raise LoadgenError(problem)
        problem = workload_problem(self)
        if problem:
            raise LoadgenError(problem)


def _typed_like(default: Any, value: Any) -> Any:
    """``value`` as the type of the option's default: numbers that crossed Pulumi arrive as floats."""
    if isinstance(default, tuple):
        kind = float if default == () else type(default[0])
        return tuple(kind(v) for v in value)
    return type(default)(value)


def _number_list(kind: type) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        try:
            return tuple(kind(part) for part in text.replace(" ", ",").split(",") if part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None

    return parse


def parse_args(argv: list[str] | None = None) -> Workload:
    """The script's command line as a ``Workload``: the inverse of ``Workload.argv``."""
    parser = argparse.ArgumentParser(
        prog="python -m loadgen",
        description="Benchmark an SGLang server's streaming routes and print one JSON document.",
    )
    for option in fields(Workload):
        # argparse formats help with %: the description's own % are written twice.
        default, help = option.default, option.metadata["description"].replace("%", "%%")
        if isinstance(default, bool):
            parser.add_argument(
                _flag(option.name), action=argparse.BooleanOptionalAction, default=default, help=help
            )
        elif isinstance(default, tuple):
            kind = int if option.name == "concurrency" else float
            parser.add_argument(_flag(option.name), type=_number_list(kind), default=default, help=help)
        else:
            parser.add_argument(_flag(option.name), type=type(default), default=default, help=help)
    options = vars(parser.parse_args(argv))
    return Workload(**{**options, "url": options["url"].rstrip("/")})
