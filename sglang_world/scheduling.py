"""What an SGLang release's scheduler uses to admit, reserve and retract, per release.

The numbers are recorded from each release's wheel by running its own code
(``python -m sglang_world.record_scheduling``) into ``scheduling.json``; nothing here is typed by
hand. The rules that use them are SGLang's ``PrefillAdder`` and ``retract_decode``:

- a running request reserves ``new_token_ratio`` x its remaining max new tokens (clipped to
  ``clip_max_new_tokens``) of the KV pool; a newly admitted one reserves all of them;
- ``new_token_ratio`` starts at ``init_new_token_ratio`` x ``--schedule-conservativeness``
  (at most 1), falls by an even step on every decode batch that found room, down to
  ``min_new_token_ratio_factor`` of its start over ``new_token_ratio_decay_steps`` batches, and
  starts over whenever the server has nothing to run;
- when a decode batch finds no room, requests are retracted and the ratio is set to what the
  remaining ones will still need: (decoded + ``retract_decode_steps`` per request) / max new tokens.

Like SGLang, the server honours the ``SGLANG_*`` variables that override these numbers, those the
release reads (recorded with the numbers).
Stdlib only: the emulator carries this package to its hosts.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "SCHEDULING_FILE",
    "VARIABLES",
    "SchedulingRules",
    "SchedulingRulesError",
    "TokenRatio",
    "scheduling_rules",
]

SCHEDULING_FILE = "scheduling.json"

VARIABLES = {
    "init_new_token_ratio": "SGLANG_INIT_NEW_TOKEN_RATIO",
    "min_new_token_ratio_factor": "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR",
    "new_token_ratio_decay_steps": "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS",
    "retract_decode_steps": "SGLANG_RETRACT_DECODE_STEPS",
    "clip_max_new_tokens": "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION",
}
"""The variable that may override each number; which ones a release reads is recorded from it."""


class SchedulingRulesError(ValueError):
    """A release has no recorded scheduling numbers, or a variable overriding one is not a number."""


@dataclass(frozen=True)
class SchedulingRules:
    """One release's scheduling numbers, as its own code computes them with no variable set."""

    release: str
    init_new_token_ratio: float
    """``new_token_ratio`` at start, before ``--schedule-conservativeness`` scales it."""
    min_new_token_ratio_factor: float
    """The floor of the ratio, as a share of its start."""
    new_token_ratio_decay_steps: float
    """Decode batches the ratio takes to fall from its start to its floor."""
    retract_decode_steps: int
    """Decode steps per remaining request a retraction keeps room for."""
    clip_max_new_tokens: int
    """Max new tokens above this are not reserved for."""
    ignore_eos_reserve_tokens: int
    """Tokens per request kept free when admitting ``ignore_eos`` requests without a prefix cache."""
    overridable: tuple[str, ...] = ()
    """The numbers this release lets a ``SGLANG_*`` variable override (``VARIABLES``)."""

    def with_environment(self, environ: Mapping[str, str]) -> SchedulingRules:
        """These numbers with the ``SGLANG_*`` variables of ``environ`` applied, as the release
        reads them (a variable it does not read changes nothing)."""
        changed: dict[str, Any] = {}
        for field in self.overridable:
            variable, current = VARIABLES[field], getattr(self, field)
            raw = environ.get(variable)
            if raw is None:
                continue
            try:
                changed[field] = type(current)(float(raw)) if isinstance(current, float) else int(raw)
            except ValueError:
                kind = "number" if isinstance(current, float) else "whole number"
                raise SchedulingRulesError(
                    f"{variable} is {raw!r}; it must be a {kind} (SGLang {self.release}'s default is "
                    f"{current}). Fix or unset the variable."
                ) from None
        return dataclasses.replace(self, **changed) if changed else self


class TokenRatio:
    """``new_token_ratio`` over a server's life: its start, floor and decay from the release's
    numbers and ``--schedule-conservativeness``; lowered per decode batch, raised by a retraction."""

    def __init__(self, rules: SchedulingRules, conservativeness: float) -> None:
        self.init = min(rules.init_new_token_ratio * conservativeness, 1.0)
        self.min = min(self.init * rules.min_new_token_ratio_factor, 1.0)
        self.decay = (self.init - self.min) / rules.new_token_ratio_decay_steps
        self.current = self.init
        self._retract_steps = rules.retract_decode_steps

    def decay_step(self) -> None:
        """A decode batch found room: the ratio falls one step toward its floor."""
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        """The server went idle (nothing to run): the ratio starts over."""
        self.current = self.init

    def after_retract(self, decoded_tokens: int, max_new_tokens: int, requests: int) -> float:
        """The ratio after a retraction, from the requests that kept running; it becomes current."""
        ratio = (decoded_tokens + self._retract_steps * requests) / (max_new_tokens + 1)
        self.current = min(1.0, ratio)
        return self.current


def _table() -> dict[str, Any]:
    text = resources.files("sglang_world").joinpath(SCHEDULING_FILE).read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


@cache
def _recorded(release: str) -> SchedulingRules:
    releases = _table()["releases"]
    if release not in releases:
        raise SchedulingRulesError(
            f"SGLang {release} has no recorded scheduling numbers (recorded: {', '.join(releases)}). "
            f"Record them from its wheel: python -m sglang_world.record_scheduling {release}"
        )
    entry = releases[release]
    return SchedulingRules(release=release, **entry["values"], overridable=tuple(entry["variables"]))


def scheduling_rules(release: str, environ: Mapping[str, str] | None = None) -> SchedulingRules:
    """The scheduling numbers of ``release``, with the ``SGLANG_*`` variables of ``environ``
    (the process's own when None) applied."""
    return _recorded(release).with_environment(os.environ if environ is None else environ)
