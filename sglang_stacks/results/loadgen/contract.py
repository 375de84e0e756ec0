"""The load generator's contract, written once: the document's ``SCHEMA``, and ``Workload``, whose
fields are both the script's options (``request_timeout_s`` is ``--request-timeout-s``) and the
stack's ``sglang-stacks:benchmark`` keys.

Standard library only: the project imports it to build the command line and to read the
document, without the HTTP client that runs the benchmark.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["SCHEMA", "LoadgenError", "Workload", "parse_args"]

SCHEMA = "sglang-stacks.loadgen/1"
"""The ``schema`` of the document the load generator prints."""


class LoadgenError(Exception):
    """Every request failed, or the workload is malformed; the message says what to change."""


def _option(default: Any, help: str, *, least: float | None = None, above: float | None = None) -> Any:
    """One option of the script: its default, its help, and the lowest value it takes (``least``,
    or anything ``above``)."""
    return field(default=default, metadata={"help": help, "least": least, "above": above})


def _flag(name: str) -> str:
    """The script's option for a ``Workload`` field: ``request_timeout_s`` is ``--request-timeout-s``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Workload:
    """What to send: fixed lengths and greedy sampling, each request run to ``output_len`` tokens
    unless ``ignore_eos`` is off.

    Each field is the script's option of the same name and the stack's ``sglang-stacks:benchmark``
    key, declared here once with its default, its help and its lowest value.
    """

    url: str = _option("http://127.0.0.1:30000", "server base URL")
    input_len: int = _option(1024, "prompt length in (about) tokens", least=1)
    output_len: int = _option(512, "tokens generated per request", least=1)
    ignore_eos: bool = _option(True, "keep generating past end-of-sequence, so every request is as long")
    concurrency: tuple[int, ...] = _option((1,), "stream counts, e.g. 1 or 1,4,16", least=1)
    warmup_requests: int = _option(2, "unmeasured requests first, at each level", least=0)
    repetitions: int = _option(5, "measured runs per concurrency level", least=1)
    requests_per_repetition: int = _option(4, "requests per run, at least the highest concurrency", least=1)
    request_timeout_s: float = _option(600.0, "limit for one request", above=0)

    @classmethod
    def from_settings(cls, url: str, settings: Mapping[str, Any]) -> Workload:
        """The workload of a stack's benchmark section; keys that are no option here are left out."""
        values: dict[str, Any] = {"url": url}
        for option in fields(cls):
            if option.name in settings:
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
                text = ",".join(str(v) for v in value) if isinstance(value, tuple) else str(value)
                argv.append(f"{flag}={text}")
        return argv

    def check(self) -> None:
        """Raise ``LoadgenError`` naming the first setting that cannot describe a workload."""
        for option in fields(self):
            value = getattr(self, option.name)
            values = value if isinstance(value, tuple) else (value,)
            least, above, rule = option.metadata["least"], option.metadata["above"], None
            if least is not None and (not values or min(values) < least):
                rule = f"at least {least:g}"
            elif above is not None and min(values) <= above:
                rule = f"more than {above:g}"
            if rule:
                shown = list(values) if isinstance(value, tuple) else value
                raise LoadgenError(f"{option.name} is {shown}, but it must be {rule}; raise it.")
        if self.requests_per_repetition < max(self.concurrency):
            raise LoadgenError(
                f"requests_per_repetition is {self.requests_per_repetition}, but concurrency "
                f"{max(self.concurrency)} needs at least {max(self.concurrency)} requests per repetition "
                "to keep every stream busy; raise requests_per_repetition."
            )


def _typed_like(default: Any, value: Any) -> Any:
    """``value`` as the type of the option's default: numbers that crossed Pulumi arrive as floats."""
    if isinstance(default, tuple):
        return tuple(int(v) for v in value)
    return type(default)(value)


def _concurrency_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.replace(" ", ",").split(",") if part)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def parse_args(argv: list[str] | None = None) -> Workload:
    """The script's command line as a ``Workload``: the inverse of ``Workload.argv``."""
    parser = argparse.ArgumentParser(
        prog="python -m loadgen",
        description="Benchmark an SGLang server's /generate stream and print one JSON document.",
    )
    for option in fields(Workload):
        default, help = option.default, option.metadata["help"]
        if isinstance(default, bool):
            parser.add_argument(
                _flag(option.name), action=argparse.BooleanOptionalAction, default=default, help=help
            )
        else:
            kind = _concurrency_list if isinstance(default, tuple) else type(default)
            parser.add_argument(_flag(option.name), type=kind, default=default, help=help)
    options = vars(parser.parse_args(argv))
    return Workload(**{**options, "url": options["url"].rstrip("/")})
