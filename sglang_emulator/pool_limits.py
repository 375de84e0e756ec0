"""The KV pool's limits a launch gives its scheduler: pool, running requests, prefill and chunk
sizes and context, read from the launch's memory plan and flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sglang_world.budget import max_request_input_len, max_request_len

if TYPE_CHECKING:
    from sglang_emulator.launch import LaunchConfig
    from sglang_emulator.memory import MemoryPlan

__all__ = ["PoolLimits", "pool_limits"]


@dataclass(frozen=True)
class PoolLimits:
    """What the launch's memory plan gives the scheduler."""

    max_total_num_tokens: int
    """The KV pool, in tokens."""
    max_running_requests: int
    chunked_prefill_size: int | None
    """Tokens of one prefill chunk; None when chunked prefill is off (``--chunked-prefill-size -1``)."""
    max_prefill_tokens: int
    """New tokens one prefill batch may hold (a single request may exceed it alone)."""
    context_length: int

    @property
    def max_req_len(self) -> int:
        """Prompt plus output of one request: less than the context and the pool."""
        return max_request_len(self.max_total_num_tokens, self.context_length)

    @property
    def max_req_input_len(self) -> int:
        """A prompt this long or longer is refused."""
        return max_request_input_len(self.max_total_num_tokens, self.context_length)


def pool_limits(config: LaunchConfig, plan: MemoryPlan) -> PoolLimits:
    """The scheduler's limits for a launch, read from its memory plan and flags (one place, so the
    plan that provides them can change without the scheduler noticing)."""
    settings = plan.world.settings
    assert settings is not None  # a plan the emulator runs has its release's settings
    chunk = settings.chunked_prefill_size
    return PoolLimits(
        max_total_num_tokens=plan.max_total_num_tokens,
        max_running_requests=plan.max_running_requests,
        chunked_prefill_size=chunk if chunk > 0 else None,
        max_prefill_tokens=settings.max_prefill_tokens,
        context_length=config.context_length,
    )
