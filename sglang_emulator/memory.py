"""The emulated server's memory: ``sglang_world``'s plan for its launch on the profile's GPU.

The plan is the one preflight makes (``sglang_world.plan_memory``): this module only feeds it the
profile's facts and the memory other processes hold, and reads back what startup logs, what
``nvidia-smi`` shows at each phase, and where startup (or the first full prefill) fails.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sglang_emulator.launch import LaunchConfig, world_release
from sglang_emulator.profile import Profile
from sglang_emulator.world import device_facts, model_facts
from sglang_world import Budget, Failure, out_of_memory
from sglang_world import MemoryPlan as WorldPlan
from sglang_world import plan_memory as world_plan

__all__ = ["MemoryPlan", "plan_memory", "served_config"]


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory of one emulated server, in GiB unless named otherwise."""

    world: WorldPlan
    """The model's plan; ``world.failure`` is where this server fails."""
    budget: Budget
    total_gib: float
    others_gib: float
    """Held by the driver's reserve and other processes before this server starts."""
    runtime_overhead_gib: float

    @property
    def failure(self) -> Failure | None:
        """Where the server fails, as SGLang would; None when it serves."""
        return self.world.failure

    @property
    def mem_fraction_static(self) -> float:
        settings = self.world.settings
        assert settings is not None
        return settings.mem_fraction_static

    @property
    def weights_gib(self) -> float:
        return self.budget.weights_gib

    @property
    def draft_weights_gib(self) -> float:
        return self.budget.draft_weights_gib

    @property
    def kv_pool_gib(self) -> float:
        return self.budget.kv_pool_gib

    @property
    def max_total_num_tokens(self) -> int:
        return max(self.budget.max_total_num_tokens or 0, 0)

    @property
    def max_running_requests(self) -> int:
        return max(self.budget.max_running_requests or 1, 1)

    @property
    def captured_batch_sizes(self) -> list[int]:
        """Decode batch sizes the server captures graphs for, after the request-slot cap."""
        return list(self.budget.captured_batch_sizes or ())

    @property
    def cuda_graph_gib(self) -> float:
        return self.budget.cuda_graph_gib or 0.0

    @property
    def draft_kv_gib(self) -> float:
        return self.budget.draft_kv_gib or 0.0

    @property
    def draft_cuda_graph_gib(self) -> float:
        return self.budget.draft_cuda_graph_gib or 0.0

    @property
    def request_pool_gib(self) -> float:
        return self.budget.request_pool_gib or 0.0

    @property
    def avail_before_load_gib(self) -> float:
        """Free when the weights start loading (after the runtime)."""
        return self.budget.free_after_init_gib

    def _free_after(self, phase: str) -> float:
        free = self.budget.free_after(phase)
        # A profile gives every fact the phases need (the KV cell, the context, the graphs' sizes).
        assert free is not None, phase
        return free

    @property
    def avail_after_load_gib(self) -> float:
        return self._free_after("load")

    @property
    def avail_after_pool_gib(self) -> float:
        return self._free_after("kv_pool")

    @property
    def avail_after_graphs_gib(self) -> float:
        return self._free_after("graphs")

    @property
    def avail_at_serve_gib(self) -> float:
        """Free once the graphs and the draft are in: what a prefill's activations get."""
        return self._free_after("draft")

    @property
    def prefill_tokens_that_fit(self) -> int | None:
        """The largest prefill forward whose activations fit; None when the model does not say."""
        per_token = self.budget.activation_mib_per_token
        if not per_token:
            return None
        return max(int(self.avail_at_serve_gib * 1024 / per_token), 0)

    def prefill_failure(self, tokens: int) -> str | None:
        """What the scheduler dies of when a prefill forward of ``tokens`` runs (its activations do
        not fit beside the pool, the graphs and the draft), or None when it fits."""
        per_token = self.budget.activation_mib_per_token
        needed_gib = tokens * (per_token or 0.0) / 1024
        if per_token is None or needed_gib <= self.avail_at_serve_gib:
            return None
        error = out_of_memory(needed_gib, self.total_gib, self.avail_at_serve_gib)
        return f"Scheduler hit an exception: {error}"

    def used_mib(self, phase: str) -> int:
        """What ``nvidia-smi`` shows this process using once ``phase`` is reached."""
        used = self.runtime_overhead_gib
        if phase in ("weights", "kv", "graphs", "ready"):
            used += self.weights_gib
        if phase in ("kv", "graphs", "ready"):
            used += max(self.kv_pool_gib, 0.0) + self.request_pool_gib
        if phase in ("graphs", "ready"):
            used += self.cuda_graph_gib
        if phase == "ready":
            used += self.draft_weights_gib + self.draft_kv_gib + self.draft_cuda_graph_gib
        return round(used * 1024)


def served_config(config: LaunchConfig, plan: MemoryPlan) -> LaunchConfig:
    """``config`` with the batch sizes the server really captures: its settings' sizes, cut at its
    request slots (what the performance model's graph overhead and eager fallback read)."""
    return dataclasses.replace(config, cuda_graph_bs=plan.captured_batch_sizes)


def plan_memory(config: LaunchConfig, profile: Profile, used_by_others_mib: int = 0) -> MemoryPlan:
    """The plan for one GPU; ``used_by_others_mib`` is memory other processes hold there."""
    device = device_facts(profile, used_by_others_mib)
    executed = config.settings if config.settings is not None and config.settings.executed else None
    plan = world_plan(
        world_release(config.release),
        config.launch,
        model_facts(profile, config.tp_size * config.launch.pp_size),
        device,
        None,
        executed,
    )
    assert plan.budget is not None or plan.failure is not None
    numbers = plan.budget
    if numbers is None:  # the release refuses the launch; nothing is allocated
        raise ValueError(plan.failure.message if plan.failure else "the release refuses this launch")
    return MemoryPlan(
        world=plan,
        budget=numbers,
        total_gib=profile.host.memory_total_mib / 1024,
        others_gib=(device.driver_reserved_mib + used_by_others_mib) / 1024,
        runtime_overhead_gib=device.runtime_mib / 1024,
    )
