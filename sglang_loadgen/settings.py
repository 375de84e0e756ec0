"""The workload's settings, declared once: `WorkloadSettings`, whose fields are both the stack's
``sglang-stacks:benchmark`` keys (the project's `BenchmarkSpec` is built on it) and the load
generator's options, each with its default, its description and its limits, and the rules across
fields (`workload_problem`).

Standard library only, as the host runs it. The limits are written in pydantic's words (``ge``,
``gt``, ``le``, ``lt``, ``pattern``, ``min_length``) in each field's metadata: pydantic reads them
when it validates a stack, and `field_problem` reads them on the host.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

__all__ = [
    "ARRIVALS",
    "DATASETS",
    "ENDPOINTS",
    "Arrival",
    "Dataset",
    "Endpoint",
    "WorkloadSettings",
    "field_problem",
    "workload_problem",
]

Endpoint = Literal["generate", "completions", "chat"]
"""SGLang's ``/generate``, OpenAI's ``/v1/completions`` and ``/v1/chat/completions``."""
Dataset = Literal["fixed", "random", "sharegpt"]
"""Fixed lengths, lengths drawn from a range, or a ShareGPT-format JSON file."""
Arrival = Literal["closed", "poisson", "gamma"]
"""Closed loop (``concurrency`` streams), or open loop at ``request_rate`` with these arrivals."""
ENDPOINTS: tuple[str, ...] = get_args(Endpoint)
DATASETS: tuple[str, ...] = get_args(Dataset)
ARRIVALS: tuple[str, ...] = get_args(Arrival)


def about(description: str, **limits: Any) -> dict[str, Any]:
    """A setting's metadata: its description (a stack key's and an option's help) and its limits,
    in pydantic's words."""
    return {"description": description, **limits}


@dataclass(frozen=True)
class WorkloadSettings:
    """What to send and how: the prompts (exactly ``input_len`` server tokens, fresh in every run
    unless ``prefix_share`` asks for a shared prefix), the load shape, and the repetitions."""

    endpoint: Endpoint = field(
        default="generate",
        metadata=about("Route: SGLang's /generate, or OpenAI's /v1/completions or /v1/chat/completions."),
    )
    input_len: int = field(
        default=1024,
        metadata=about(
            "Prompt tokens per request, as the server counts them (checked against every response).", ge=1
        ),
    )
    output_len: int = field(default=512, metadata=about("Generated tokens per request.", ge=1))
    ignore_eos: bool = field(
        default=True,
        metadata=about("Keep generating past end-of-sequence, so every request yields output_len tokens."),
    )
    dataset: Dataset = field(
        default="fixed",
        metadata=about("fixed lengths, random lengths in [range_ratio * len, len], or a sharegpt file."),
    )
    range_ratio: float = field(
        default=0.5,
        metadata=about(
            "random: the shortest length drawn, as a fraction of input_len and output_len.", gt=0, le=1
        ),
    )
    dataset_path: str = field(
        default="",
        metadata=about(
            "sharegpt: a ShareGPT-format JSON file on this machine; it is shipped with the benchmark.",
            pattern=r"^[^\x00-\x1f\x7f]*$",
        ),
    )
    seed: int = field(
        default=0,
        metadata=about("Seed of the random lengths and of the ShareGPT sample: the same in every run.", ge=0),
    )
    prefix_share: float = field(
        default=0.0,
        metadata=about(
            "Fraction of each prompt shared by all requests of a run, to measure the prefix cache on "
            "purpose; 0 makes every prompt of every run distinct.",
            ge=0,
            lt=1,
        ),
    )
    arrival: Arrival = field(
        default="closed",
        metadata=about("closed: concurrency streams; poisson or gamma: requests arrive at request_rate."),
    )
    request_rate: tuple[float, ...] = field(
        default=(),
        metadata=about("Open loop: requests per second, one load level each (a rate sweep when several)."),
    )
    burstiness: float = field(
        default=1.0,
        metadata=about(
            "gamma arrivals: shape of the gaps; 1 is Poisson, below 1 burstier, above 1 more regular.", gt=0
        ),
    )
    concurrency: tuple[int, ...] = field(
        default=(1,),
        metadata=about("Closed loop: concurrent streams to measure, one level each.", min_length=1),
    )
    duration_s: float = field(
        default=0.0,
        metadata=about(
            "If above 0, each repetition sends requests for this long instead of requests_per_repetition.",
            ge=0,
        ),
    )
    warmup_requests: int = field(
        default=2, metadata=about("Requests sent and discarded before measuring, at each level.", ge=0)
    )
    repetitions: int = field(
        default=5,
        metadata=about("Measured repetitions per level; the mean and 95 % interval come from these.", ge=1),
    )
    requests_per_repetition: int = field(
        default=4, metadata=about("Requests per repetition; at least the highest concurrency.", ge=1)
    )
    request_timeout_s: float = field(
        default=600.0, metadata=about("Longest one request may take before it counts as an error.", gt=0)
    )

    @property
    def open_loop(self) -> bool:
        """Whether requests arrive at a rate rather than when a stream is free."""
        return self.arrival != "closed"

    @property
    def levels(self) -> tuple[float, ...]:
        """The load levels in run order: request rates (open loop) or stream counts (closed)."""
        return self.request_rate if self.open_loop else tuple(float(c) for c in self.concurrency)


def workload_problem(settings: WorkloadSettings) -> str | None:
    """What makes ``settings`` no workload across fields (the limits of one field are its own),
    as a sentence with the fix; None when they describe one."""
    if any(c < 1 for c in settings.concurrency):
        return f"concurrency is {list(settings.concurrency)}, but it must be at least 1; raise it."
    if len(set(settings.concurrency)) != len(settings.concurrency):
        return f"concurrency {list(settings.concurrency)} repeats a level; list each once."
    if (settings.dataset == "sharegpt") != bool(settings.dataset_path):
        return (
            "dataset sharegpt needs dataset_path (a ShareGPT JSON file), and dataset_path needs "
            "dataset sharegpt; set both or neither."
        )
    if settings.open_loop:
        if not settings.request_rate or min(settings.request_rate) <= 0:
            return (
                f"arrival {settings.arrival} needs request_rate, one or more rates above 0 requests per "
                f"second (got {list(settings.request_rate)}); set it (e.g. [2, 4, 8]), or set arrival closed."
            )
        return None
    if settings.request_rate:
        return "request_rate applies to open loop only; set arrival poisson or gamma."
    most = max(settings.concurrency)
    if not settings.duration_s and settings.requests_per_repetition < most:
        return (
            f"requests_per_repetition is {settings.requests_per_repetition}, but concurrency {most} "
            f"needs at least {most} requests per repetition to keep every stream busy; set it to at "
            f"least {most}."
        )
    return None


# Each limit's test, and how a message says it and its fix.
_BOUNDS = {
    "ge": (operator.ge, "at least", "raise"),
    "gt": (operator.gt, "more than", "raise"),
    "le": (operator.le, "at most", "lower"),
    "lt": (operator.lt, "below", "lower"),
}


def field_problem(name: str, value: Any, kind: Any, limits: Mapping[str, Any]) -> str | None:
    """What makes one field's value wrong by its own limits and choices, or None."""
    choices = globals().get(str(kind))  # a Literal alias of this module, by its name
    if get_origin(choices) is Literal and value not in get_args(choices):
        return f"{name} is {value!r}, but it must be one of {', '.join(get_args(choices))}."
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, (holds, words, change) in _BOUNDS.items():
            bound = limits.get(key)
            if bound is not None and not holds(value, bound):
                return f"{name} is {value}, but it must be {words} {bound:g}; {change} it."
    if "min_length" in limits and len(value) < limits["min_length"]:
        return f"{name} is {list(value)}, but it needs at least {limits['min_length']} value(s); add them."
    if "pattern" in limits and not re.match(limits["pattern"], value):
        return f"{name} {value!r} holds a control character; remove it."
    return None
