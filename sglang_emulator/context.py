"""What the emulator's HTTP handlers share: the launch, its memory plan, the engine, the faults,
readiness, and the counts of generation requests."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sglang_emulator.disaggregation import KvHandoff
from sglang_emulator.engine import Engine
from sglang_emulator.faults import Faults
from sglang_emulator.launch import LaunchConfig
from sglang_emulator.memory import MemoryPlan
from sglang_emulator.profile import Profile

__all__ = ["ServerContext"]


@dataclass
class ServerContext:
    """Everything the handlers read: the launch, its plan, the engine and the readiness state."""

    config: LaunchConfig
    profile: Profile
    plan: MemoryPlan
    engine: Engine
    faults: Faults
    emulator_note: str
    on_generation_received: Callable[[int], None]
    """Called with each generation request's number (1-based) as it arrives, before it is served."""
    on_generation_finished: Callable[[], None]
    """Called when a generation request has been answered in full."""
    log: logging.Logger
    """The server's log, where SGLang's HTTP server reports a failed health check."""
    health_check_timeout_s: float = 20.0
    """How long a health check waits for the scheduler's answer (``SGLANG_HEALTH_CHECK_TIMEOUT``)."""
    handoff: KvHandoff = field(default_factory=KvHandoff)
    """A prefill worker's rooms whose KV waits for its decode worker."""
    ready: threading.Event = field(default_factory=threading.Event)
    started_s: float = field(default_factory=time.time)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _generation_requests: int = 0
    in_flight: int = 0
    """Generation requests received and not yet answered in full (``/get_load``'s ``num_reqs``)."""

    def track(self, delta: int) -> None:
        """Counts a generation request in (+1) or out (-1)."""
        with self._lock:
            self.in_flight += delta

    def next_generation_number(self) -> int:
        with self._lock:
            self._generation_requests += 1
            return self._generation_requests

    def kv_bytes(self, tokens: int) -> int:
        """The KV cache of ``tokens`` tokens over every tensor-parallel rank: what a prefill worker
        sends a decode worker for a prompt of that length."""
        return (self.plan.budget.kv_cell_bytes or 0) * self.config.tp_size * tokens

    def server_info(self) -> dict[str, Any]:
        stats = self.engine.stats
        internal: dict[str, Any] = {
            "last_gen_throughput": stats.last_gen_throughput,
            "max_total_num_tokens": self.plan.max_total_num_tokens,
            "effective_max_running_requests_per_dp": self.plan.max_running_requests,
            "memory_usage": {
                "weight": round(self.plan.weights_gib + self.plan.draft_weights_gib, 2),
                "kvcache": round(max(self.plan.kv_pool_gib, 0.0), 2),
                "token_capacity": self.plan.max_total_num_tokens,
                "graph": round(self.plan.cuda_graph_gib + self.plan.draft_cuda_graph_gib, 2),
            },
        }
        if self.config.speculative is not None:
            internal["avg_spec_accept_length"] = stats.avg_spec_accept_length
        info = dict(self.config.server_args)
        info.update(
            mem_fraction_static=self.plan.mem_fraction_static,
            max_running_requests=self.plan.max_running_requests,
            internal_states=[internal],
            version=self.config.release,
            emulator={
                "name": "sglang-emulator",
                "emulated_sglang_version": self.config.release,
                "profile": self.profile.name,
                "profile_source": self.profile.source,
                "note": self.emulator_note,
            },
        )
        return info
