"""Where a plan fails and what SGLang prints there, phase by phase.

The phases follow the server's startup: ``load`` (weights), ``kv_pool`` (the pool and the
request-to-token table), ``graphs`` (decode CUDA graphs), ``draft`` (the draft model, its KV
cache and graphs), then ``prefill`` (the first prefill of a full chunk) and ``workload`` (prompts
longer than the pool admits). The messages are SGLang's; the emulator prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from sglang_world.kv import kv_element_bytes

if TYPE_CHECKING:
    from sglang_world.budget import Budget
    from sglang_world.facts import Launch, Workload
    from sglang_world.settings import ServerSettings

__all__ = ["GRAPH_CAPTURE_HINTS", "Failure", "Phase", "first_failure", "input_too_long", "out_of_memory"]

Phase = Literal["launch", "load", "kv_pool", "graphs", "draft", "prefill", "workload"]

GRAPH_CAPTURE_HINTS = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)"
)
"""What SGLang prints under a failed CUDA-graph capture."""


@dataclass(frozen=True)
class Failure:
    """The first phase that does not fit, SGLang's error there, and what to change."""

    phase: Phase
    message: str
    """The error line SGLang prints (exception type and text)."""
    fix: str
    """What to change, as a sentence."""
    needed_gib: float = 0.0
    """What the phase needed."""
    free_gib: float = 0.0
    """What was free when it started."""
    direction: Literal["raise", "lower", "none"] = "none"
    """Which way ``mem_fraction_static`` would have to move to get past this phase (``none``: no
    fraction helps)."""


def out_of_memory(tried_gib: float, total_gib: float, free_gib: float) -> str:
    """torch's out-of-memory error as SGLang's log shows it."""
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried_gib:.2f} GiB. GPU 0 has a "
        f"total capacity of {total_gib:.2f} GiB of which {max(free_gib, 0.0):.2f} GiB is free."
    )


def input_too_long(input_len: int, limit: int) -> str:
    """What SGLang answers a prompt of ``limit`` tokens or more (its ``max_req_input_len``)."""
    return (
        f"Input length ({input_len} tokens) exceeds the maximum allowed length ({limit} tokens). "
        "Use a shorter input or enable --allow-auto-truncate."
    )


def _oom(phase: Phase, needed: float, free: float, total: float, fix: str, prefix: str = "") -> Failure:
    direction: Literal["raise", "lower", "none"] = "none" if phase == "load" else "lower"
    return Failure(phase, prefix + out_of_memory(needed, total, free), fix, needed, free, direction)


def first_failure(
    settings: ServerSettings, launch: Launch, numbers: Budget, workload: Workload | None
) -> tuple[Failure | None, str | None]:
    """The first failing phase, or (None, why the rest cannot be judged), or (None, None): fits."""
    total = numbers.total_gib
    free = numbers.free_after("load")
    assert free is not None
    if numbers.weights_gib > numbers.free_after_init_gib:
        fix = "Use more GPUs (a larger tp_size) or free the GPUs other processes hold."
        return _oom("load", numbers.weights_gib, numbers.free_after_init_gib, total, fix), None
    tokens = numbers.max_total_num_tokens
    if settings.pool_refusal is not None:
        fix = "Raise mem_fraction_static as SGLang says, so the static pool holds the weights and a KV cache."
        return Failure(
            "kv_pool", settings.pool_refusal, fix, numbers.weights_gib, numbers.static_pool_gib, "raise"
        ), None
    if numbers.kv_pool_gib <= 0 or (tokens is not None and tokens <= 0):
        message = (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: self.server_args.mem_fraction_static={settings.mem_fraction_static}"
        )
        fix = "Raise mem_fraction_static so the static pool holds the weights and a KV cache."
        return Failure("kv_pool", message, fix, numbers.weights_gib, numbers.static_pool_gib, "raise"), None
    if tokens is None:
        dtype = launch.kv_cache_dtype
        if dtype != "auto" and kv_element_bytes(dtype) is None:
            return (
                None,
                f"the plan has no element size for --kv-cache-dtype {dtype}, so the pool's size in "
                "tokens is unknown",
            )
        return None, "the model's KV cell (attention shape) is unknown, so the pool's size in tokens is too"
    after_pool = numbers.free_after("kv_pool")
    if after_pool is None:
        return None, "the model's context length is unknown, so the request-to-token table's size is too"
    if after_pool < 0:
        assert numbers.request_pool_gib is not None
        fix = "Lower mem_fraction_static, or set max_running_requests to fewer requests."
        return _oom(
            "kv_pool", numbers.request_pool_gib, after_pool + numbers.request_pool_gib, total, fix
        ), None
    after_graphs = numbers.free_after("graphs")
    if after_graphs is None:
        return None, "the model's CUDA-graph memory per batch size is unknown"
    if after_graphs < 0:
        assert numbers.cuda_graph_gib is not None
        fix = "Lower mem_fraction_static or cuda_graph_max_bs."
        failure = _oom(
            "graphs", numbers.cuda_graph_gib, after_pool, total, fix, "Exception: Capture cuda graph failed: "
        )
        hinted = f"{failure.message}\n{GRAPH_CAPTURE_HINTS}"
        return Failure("graphs", hinted, fix, failure.needed_gib, after_pool, "lower"), None
    at_serve = numbers.free_after("draft")
    if at_serve is None:
        return None, "the draft model's KV cell or CUDA-graph memory is unknown"
    if at_serve < 0:
        needed = numbers.draft_weights_gib + (numbers.draft_kv_gib or 0) + (numbers.draft_cuda_graph_gib or 0)
        fix = "Lower mem_fraction_static to leave room for the draft model, its KV cache and its graphs."
        return _oom("draft", needed, after_graphs, total, fix), None
    activation = numbers.prefill_activation_gib
    if activation is None:
        return None, "the model's activation memory per prefill token is unknown"
    if activation > at_serve:
        fix = "Lower chunked_prefill_size or mem_fraction_static."
        return _oom("prefill", activation, at_serve, total, fix, "Scheduler hit an exception: "), None
    longest = numbers.max_request_input_tokens
    if workload is not None and longest is not None and workload.input_len >= longest:
        message = input_too_long(workload.input_len, longest)
        fix = "Raise mem_fraction_static for a larger KV pool, or shorten the prompts."
        return Failure("workload", message, fix, direction="raise"), None
    return None, None
