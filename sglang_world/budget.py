"""One GPU's memory, phase by phase, the way an SGLang server fills it.

In SGLang's order: the driver's reserve and the runtime (CUDA context, cuBLAS, NCCL) are gone
before the server first measures free memory; the weights load; the KV pool gets what the
static fraction leaves (``profile_max_num_token``: free after the weights minus the measured
free memory times ``1 - mem_fraction_static``; from 0.5.7 the release's own pool code, run from
its wheel, when the plan could run it) and the request-to-token table follows it; the
decode CUDA graphs are captured; a draft model loads with its own KV cache and graphs; what is
left holds a prefill's activations. Each phase either fits or is where the server fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_world.facts import DeviceFacts, Launch, ModelFacts
from sglang_world.settings import ServerSettings

__all__ = [
    "Budget",
    "budget",
    "free_at_start_gib",
    "loaded_gib",
    "max_request_input_len",
    "max_request_len",
    "pool_tokens",
]

_GIB = 1 << 30
_REQUEST_SLOT_BYTES = 4
"""The request-to-token table keeps one int32 per context position of every request slot."""
_CONTEXT_EXTRA = 4
"""Slots the table keeps beyond the context length (plus the draft tokens when speculating)."""
_REQUEST_POOL_TOKENS_PER_REQUEST = 512
_REQUEST_POOL_BOUNDS = (2048, 4096)
_TOKENS_PER_RUNNING_REQUEST = 2
_INPUT_MARGIN = 5
"""SGLang admits prompts up to the largest request length minus this."""


def max_request_len(pool_tokens: int, context_length: int) -> int:
    """The longest request (prompt and output) SGLang serves: below the context and the pool."""
    return min(context_length - 1, pool_tokens - 1)


def max_request_input_len(pool_tokens: int, context_length: int) -> int:
    """SGLang's ``max_req_input_len``: a prompt of this many tokens or more is refused."""
    return max_request_len(pool_tokens, context_length) - _INPUT_MARGIN


@dataclass(frozen=True)
class Budget:
    """Per-GPU memory in GiB (SGLang's ``GB``) at each phase; None where a fact is unknown."""

    total_gib: float
    """nvidia-smi's total."""
    free_after_init_gib: float
    """What SGLang measures before loading: the total less the driver, other processes, the runtime."""
    weights_gib: float
    static_pool_gib: float
    """Free after init times the fraction: weights plus KV pool."""
    kv_pool_gib: float
    """What the static pool leaves for the KV cache (negative: nothing)."""
    kv_cell_bytes: int | None
    max_total_num_tokens: int | None
    request_pool_size: int | None
    """Request slots of the request-to-token table."""
    request_pool_gib: float | None
    max_running_requests: int | None
    captured_batch_sizes: tuple[int, ...] | None
    """Decode batch sizes captured, after the runtime's cap by the request slots."""
    cuda_graph_gib: float | None
    draft_weights_gib: float
    draft_kv_gib: float | None
    draft_cuda_graph_gib: float | None
    largest_prefill_tokens: int | None
    """Tokens of the largest prefill forward: a full chunk (or ``max_prefill_tokens`` unchunked)."""
    prefill_activation_gib: float | None
    activation_mib_per_token: float | None
    """The model's activation memory per prefill token (what a prefill of any size needs)."""
    max_request_input_tokens: int | None
    """SGLang's ``max_req_input_len``: prompts of this many tokens or more are refused."""
    draft_in_pool: bool = False
    """The release's own pool code sized the pool with the draft's KV in it (0.5.14 on): the draft's
    weights were loaded before it, and its KV cache is charged per token beside the target's."""

    def free_after(self, phase: str) -> float | None:
        """Free memory once ``phase`` (``load``, ``kv_pool``, ``graphs``, ``draft``) is done."""
        free = self.free_after_init_gib - self.weights_gib
        if self.draft_in_pool:
            free -= self.draft_weights_gib
        if phase == "load":
            return free
        if self.request_pool_gib is None:
            return None
        free -= max(self.kv_pool_gib, 0.0) + self.request_pool_gib
        if phase == "kv_pool":
            return free
        if self.cuda_graph_gib is None:
            return None
        free -= self.cuda_graph_gib
        if phase == "graphs":
            return free
        if self.draft_kv_gib is None or self.draft_cuda_graph_gib is None:
            return None
        if self.draft_in_pool:
            return free - self.draft_cuda_graph_gib
        return free - self.draft_weights_gib - self.draft_kv_gib - self.draft_cuda_graph_gib


def _profiled(rest_gib: float, cell: int | None) -> int | None:
    """The tokens a budget of ``rest_gib`` holds in cells of ``cell`` bytes, as profiled."""
    return None if cell is None else int(rest_gib * _GIB) // cell


def _capped(profiled: int | None, launch: Launch) -> int | None:
    """The profiled tokens capped by ``--max-total-tokens`` and aligned to the page size."""
    if profiled is None:
        return None
    tokens = profiled if launch.max_total_tokens is None else min(profiled, launch.max_total_tokens)
    page = launch.page_size or 1
    return max(tokens // page * page, 0)  # a negative pool is SGLang's "Not enough memory"


def pool_tokens(rest_gib: float, cell: int | None, launch: Launch) -> int | None:
    """The KV pool in tokens the plan's arithmetic gives a budget of ``rest_gib`` and a per-token
    ``cell`` (bytes): capped by ``--max-total-tokens``, aligned to the page size."""
    return _capped(_profiled(rest_gib, cell), launch)


def _request_pool(tokens: int | None, context: int | None, settings: ServerSettings) -> int | None:
    if settings.max_running_requests is not None:
        return settings.max_running_requests
    if tokens is None or context is None:
        return None
    low, high = _REQUEST_POOL_BOUNDS
    return min(max(int(tokens / context * _REQUEST_POOL_TOKENS_PER_REQUEST), low), high)


def _captured(settings: ServerSettings, slots: int | None) -> tuple[int, ...] | None:
    if settings.cuda_graph_disabled or not settings.cuda_graph_bs:
        return ()
    if slots is None:
        return None
    sizes = set(settings.cuda_graph_bs)
    if max(sizes) > slots:
        sizes.add(slots)  # so the largest batch the server can run is captured too
    return tuple(sorted(bs for bs in sizes if bs <= slots))


def free_at_start_gib(device: DeviceFacts) -> float:
    """What SGLang measures free before loading: the total less the driver, other processes, the runtime."""
    return (device.total_mib - device.driver_reserved_mib - device.others_mib - device.runtime_mib) / 1024


def loaded_gib(launch: Launch, model: ModelFacts, device: DeviceFacts) -> float:
    """What is free once the target's weights and a draft model's are loaded."""
    draft = model.draft.weights_gib if launch.has_draft_model and model.draft else 0.0
    return free_at_start_gib(device) - model.weights_gib - draft


def _draft_cell(launch: Launch, model: ModelFacts) -> int | None:
    draft = model.draft
    if not launch.has_draft_model or draft is None or draft.kv is None:
        return None
    return draft.kv.bytes_per_token(launch.tp_size // launch.attn_dp_size, launch.kv_cache_dtype)


def budget(settings: ServerSettings, launch: Launch, model: ModelFacts, device: DeviceFacts) -> Budget:
    """The per-GPU budget of ``settings`` for ``model`` on ``device``: the KV cache gets what the
    release's own pool code gave it when it was run (``settings.kv_budget_gib``), a draft's KV then
    inside it unless that code sized the pool before the draft loaded (``settings.draft_after_pool``),
    and holds the tokens that code sized (``settings.kv_tokens``) with the running limit it admits
    and the request slots it sized; else what 0.5.8's arithmetic gives."""
    free = free_at_start_gib(device)
    fraction = settings.mem_fraction_static
    draft_in_pool = (
        settings.kv_budget_gib is not None and launch.has_draft_model and not settings.draft_after_pool
    )
    rest = (
        settings.kv_budget_gib if settings.kv_budget_gib is not None else fraction * free - model.weights_gib
    )
    attn_tp = launch.tp_size // launch.attn_dp_size
    kv = model.kv.stage(launch.pp_size) if model.kv else None
    cell = kv.bytes_per_token(attn_tp, launch.kv_cache_dtype) if kv else None
    draft_cell = _draft_cell(launch, model)
    if draft_in_pool:
        cell = cell + draft_cell if cell is not None and draft_cell is not None else None
    # 0.5.8 estimates its request table from the pool it profiled, before --max-total-tokens caps it
    # and the page aligns it (``init_memory_pool``); a pool its own code sized comes with its own
    # tokens and request slots.
    tokens: int | None
    profiled: int | None
    if settings.kv_tokens is not None:
        tokens = profiled = settings.kv_tokens
    else:
        profiled = _profiled(rest, cell)
        tokens = _capped(profiled, launch)
    context = launch.context_length or model.context_length
    slots = settings.request_slots
    if slots is None:
        slots = _request_pool(profiled, context, settings)
    draft_tokens = launch.speculative_num_draft_tokens or 0
    pool_gib = None
    if slots is not None and context is not None:
        pool_gib = slots * (context + _CONTEXT_EXTRA + draft_tokens) * _REQUEST_SLOT_BYTES / _GIB
    running = None
    if tokens is not None and slots is not None:
        limit = settings.max_running_requests
        wanted = tokens // _TOKENS_PER_RUNNING_REQUEST if limit is None else limit // launch.attn_dp_size
        running = min(wanted, slots)
    if settings.running_limit is not None:
        running = settings.running_limit
    captured = _captured(settings, slots)
    graphs = None
    if captured is not None and (not captured or model.cuda_graph_mib_per_size is not None):
        graphs = len(captured) * (model.cuda_graph_mib_per_size or 0.0) / 1024
    draft_weights = 0.0
    draft_kv: float | None = 0.0
    draft_graphs: float | None = 0.0
    if launch.has_draft_model:
        draft = model.draft
        draft_weights = draft.weights_gib if draft else 0.0
        draft_kv = tokens * draft_cell / _GIB if tokens is not None and draft_cell is not None else None
        per_size = draft.cuda_graph_mib_per_size if draft else None
        draft_graphs = (
            len(captured) * per_size / 1024 if captured is not None and per_size is not None else None
        )
    largest, activation, longest = None, None, None
    if tokens is not None and context is not None:
        longest = max_request_input_len(tokens, context)
        chunk = settings.chunked_prefill_size
        largest = max(min(chunk if chunk > 0 else settings.max_prefill_tokens, longest - 1), 0)
        if model.activation_mib_per_token is not None:
            activation = largest * model.activation_mib_per_token / 1024
    return Budget(
        total_gib=device.total_mib / 1024,
        free_after_init_gib=free,
        weights_gib=model.weights_gib,
        static_pool_gib=fraction * free,
        kv_pool_gib=rest,
        kv_cell_bytes=cell,
        max_total_num_tokens=tokens,
        request_pool_size=slots,
        request_pool_gib=pool_gib,
        max_running_requests=running,
        captured_batch_sizes=captured,
        cuda_graph_gib=graphs,
        draft_weights_gib=draft_weights,
        draft_kv_gib=draft_kv,
        draft_cuda_graph_gib=draft_graphs,
        largest_prefill_tokens=largest,
        prefill_activation_gib=activation,
        activation_mib_per_token=model.activation_mib_per_token,
        max_request_input_tokens=longest,
        draft_in_pool=draft_in_pool,
    )
