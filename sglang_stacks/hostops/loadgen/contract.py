"""The load generator's contract, written once: ``Workload``, whose fields are both the script's
options (``request_timeout_s`` is ``--request-timeout-s``) and the stack's
``sglang-stacks:benchmark`` keys. The document it prints is `document`'s.

Standard library only: the project imports it to build the command line and to read the
document, without the HTTP client that runs the benchmark.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any

__all__ = [
    "ARRIVALS",
    "DATASETS",
    "ENDPOINTS",
    "LoadgenError",
    "LoadgenExit",
    "Workload",
    "parse_args",
]

ENDPOINTS = ("generate", "completions", "chat")
"""SGLang's ``/generate``, OpenAI's ``/v1/completions`` and ``/v1/chat/completions``."""
DATASETS = ("fixed", "random", "sharegpt")
"""Fixed lengths, lengths drawn from a range, or a ShareGPT-format JSON file."""
ARRIVALS = ("closed", "poisson", "gamma")
"""Closed loop (``concurrency`` streams), or open loop at ``request_rate`` with these arrivals."""


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


def _option(default: Any, help: str, *, least: float | None = None, above: float | None = None) -> Any:
    """One option of the script: its default, its help, and the lowest value it takes (``least``,
    or anything ``above``)."""
    return field(default=default, metadata={"help": help, "least": least, "above": above})


def _flag(name: str) -> str:
    """The script's option for a ``Workload`` field: ``request_timeout_s`` is ``--request-timeout-s``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Workload:
    """What to send and how: the prompts (exactly ``input_len`` server tokens, fresh in every run
    unless ``prefix_share`` asks for a shared prefix), the load shape, and the repetitions.

    Each field is the script's option of the same name and the stack's ``sglang-stacks:benchmark``
    key, declared here once with its default, its help and its lowest value.
    """

    url: str = _option("http://127.0.0.1:30000", "server base URL")
    endpoint: str = _option("generate", "generate (SGLang), completions or chat (OpenAI routes)")
    input_len: int = _option(1024, "prompt tokens per request, as the server counts them", least=1)
    output_len: int = _option(512, "tokens generated per request", least=1)
    ignore_eos: bool = _option(True, "keep generating past end-of-sequence, so every request is as long")
    dataset: str = _option("fixed", "fixed lengths, random lengths in a range, or sharegpt")
    range_ratio: float = _option(0.5, "random: lengths drawn from [ratio * len, len]", above=0)
    dataset_path: str = _option("", "sharegpt: the JSON file of conversations")
    seed: int = _option(0, "seed of the lengths and of the ShareGPT sample", least=0)
    prefix_share: float = _option(0.0, "fraction of each prompt shared by every request of a run", least=0)
    arrival: str = _option("closed", "closed loop, or open loop with poisson or gamma arrivals")
    request_rate: tuple[float, ...] = _option((), "open loop: requests per second, one level each")
    burstiness: float = _option(1.0, "gamma arrivals: shape; below 1 is burstier than poisson", above=0)
    concurrency: tuple[int, ...] = _option((1,), "closed loop: stream counts, one level each", least=1)
    duration_s: float = _option(0.0, "if above 0, each repetition sends for this long", least=0)
    warmup_requests: int = _option(2, "unmeasured requests first, at each level", least=0)
    repetitions: int = _option(5, "measured runs per level", least=1)
    requests_per_repetition: int = _option(4, "requests per run, at least the highest concurrency", least=1)
    request_timeout_s: float = _option(600.0, "limit for one request", above=0)
    progress_file: str = _option("", "append one JSON line per finished repetition to this file")

    @classmethod
    def from_settings(cls, url: str, settings: Mapping[str, Any]) -> Workload:
        """The workload of a stack's benchmark section; keys that are no option here are left out."""
        values: dict[str, Any] = {"url": url}
        for option in fields(cls):
            if option.name in settings and settings[option.name] is not None:
                values[option.name] = _typed_like(option.default, settings[option.name])
        return cls(**values)

    @property
    def open_loop(self) -> bool:
        """Whether requests arrive at a rate rather than when a stream is free."""
        return self.arrival != "closed"

    @property
    def levels(self) -> tuple[float, ...]:
        """The load levels in run order: request rates (open loop) or stream counts (closed)."""
        return self.request_rate if self.open_loop else tuple(float(c) for c in self.concurrency)

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
        """Raise ``LoadgenError`` naming the first setting that cannot describe a workload."""
        for option in fields(self):
            value = getattr(self, option.name)
            values = value if isinstance(value, tuple) else (value,)
            least, above, rule = option.metadata["least"], option.metadata["above"], None
            if not values:
                continue
            if least is not None and min(values) < least:
                rule = f"at least {least:g}"
            elif above is not None and min(values) <= above:
                rule = f"more than {above:g}"
            if rule:
                shown = list(values) if isinstance(value, tuple) else value
                raise LoadgenError(f"{option.name} is {shown}, but it must be {rule}; raise it.")
        self._check_choices()
        self._check_shape()

    def _check_choices(self) -> None:
        for name, allowed in (("endpoint", ENDPOINTS), ("dataset", DATASETS), ("arrival", ARRIVALS)):
            if getattr(self, name) not in allowed:
                raise LoadgenError(
                    f"{name} is {getattr(self, name)!r}, but it must be one of {', '.join(allowed)}."
                )
        if self.prefix_share >= 1:
            raise LoadgenError(f"prefix_share is {self.prefix_share}, but it must be below 1; lower it.")
        if self.range_ratio > 1:
            raise LoadgenError(f"range_ratio is {self.range_ratio}, but it must be at most 1; lower it.")
        if (self.dataset == "sharegpt") != bool(self.dataset_path):
            raise LoadgenError(
                "dataset sharegpt needs dataset_path (a ShareGPT JSON file), and dataset_path needs "
                "dataset sharegpt; set both or neither."
            )

    def _check_shape(self) -> None:
        if self.open_loop:
            if not self.request_rate or min(self.request_rate) <= 0:
                raise LoadgenError(
                    f"arrival {self.arrival} needs request_rate, one or more rates above 0 requests "
                    f"per second (got {list(self.request_rate)}); set it, or set arrival closed."
                )
            return
        if self.request_rate:
            raise LoadgenError("request_rate applies to open loop only; set arrival poisson or gamma.")
        if not self.duration_s and self.requests_per_repetition < max(self.concurrency):
            raise LoadgenError(
                f"requests_per_repetition is {self.requests_per_repetition}, but concurrency "
                f"{max(self.concurrency)} needs at least {max(self.concurrency)} requests per repetition "
                "to keep every stream busy; raise requests_per_repetition."
            )


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
        default, help = option.default, option.metadata["help"]
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
