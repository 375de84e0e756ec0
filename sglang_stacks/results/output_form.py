"""How the stack outputs write what `pulumi up` prints last, so that its summary fits a screen: a
benchmark result's latency percentiles and its runs on one line each, the memory plan's headline
figures (the whole plan is ``sglang-stacks render``'s), and how each is read back into its model.

A benchmark level printed a line per figure took 44 lines, the memory plan 27: with a second copy of
the only level, the outputs of one host's stack were 146 lines, `tok_s` last below them all.
Outputs written before in the longer form read back all the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_stacks.config.memory_plan import MemoryPlan
from sglang_stacks.results.stats import BenchmarkResult

__all__ = ["MEMORY_HEADLINE", "benchmark_read", "benchmark_written", "memory_written"]

_PERCENTILES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
_NUMBER_LISTS = ("tok_s_ci95", "tok_s_runs")

MEMORY_HEADLINE = (
    "release",
    "verdict",
    "mem_fraction_static",
    "fraction_source",
    "settings_from",
    "pool_from",
    "kv_cache_gb",
    "max_total_num_tokens",
    "max_running_requests",
    "cuda_graph_max_bs",
    "captured_batch_sizes",
    "failure_phase",
    "failure",
    "fix",
    "unknown_reason",
)
"""The memory plan's figures a stack output keeps: the verdict, the settings the release chose and
the KV pool they leave, and where and why a plan that does not fit fails."""


def _number(value: float) -> str:
    """A number as Python writes it shortest, which reads back as the same float (86.0 as 86)."""
    text = repr(float(value))
    return text.removesuffix(".0")


def benchmark_written(result: BenchmarkResult) -> dict[str, Any]:
    """``result`` as the stack output writes it: what was not measured left out, each latency's
    percentiles on one line (``"p50 28.18, p90 28.76, p95 28.83, p99 28.89"``) and the runs and
    their interval as numbers on one line (``"86.43 86.74 86.6"``)."""
    written = result.model_dump(mode="json", exclude_none=True)
    for name in _PERCENTILES:
        if name in written:
            written[name] = ", ".join(f"{q} {_number(v)}" for q, v in written[name].items() if v is not None)
    for name in _NUMBER_LISTS:
        written[name] = " ".join(_number(v) for v in written[name])
    return written


def benchmark_read(value: Any) -> Any:
    """A benchmark result as a stack output holds it, in this form or the longer one, as the
    model's fields (what is not a mapping is left for the model to refuse)."""
    if not isinstance(value, Mapping):
        return value
    fields = dict(value)
    for name in _PERCENTILES:
        if isinstance(fields.get(name), str):
            pairs = (part.split() for part in fields[name].split(","))
            fields[name] = {quantile: float(number) for quantile, number in pairs}
    for name in _NUMBER_LISTS:
        if isinstance(fields.get(name), str):
            fields[name] = [float(word) for word in fields[name].split()]
    return fields


def memory_written(plan: MemoryPlan) -> dict[str, Any]:
    """The memory plan's headline as the stack output writes it (``MEMORY_HEADLINE``), the captured
    batch sizes (as many as 52) as one line of numbers, which reads back as the list."""
    return {key: value for key, value in plan.as_output().items() if key in MEMORY_HEADLINE}
