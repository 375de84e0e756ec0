"""A launch command as the memory model reads it, parsed by the release's own flag table.

Preflight and the emulator read a launch the same way: the argv parsed by the release's parser
(``sglang_flags.parser``), then every flag that decides memory taken under whichever name
that release gives it (``--cuda-graph-max-bs`` became ``--cuda-graph-max-bs-decode`` in 0.5.14,
``--enable-dp-attention --dp-size N`` became ``--attn-dp-size N``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_flags import parser
from sglang_flags.renames import spellings
from sglang_world.facts import Launch

__all__ = ["MEMORY_ENVIRONMENT", "launch_from_args", "launch_from_argv"]

MEMORY_ENVIRONMENT = ("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING",)
"""Environment variables that change how a release sizes memory."""


def _get(raw: Mapping[str, Any], name: str) -> Any:
    """The parsed value of ``name`` under whichever spelling the release has."""
    return next((raw[dest] for dest in spellings(name) if raw.get(dest) is not None), None)


def _int(raw: Mapping[str, Any], name: str) -> int | None:
    value = _get(raw, name)
    return None if value is None else int(value)


def _graphs_disabled(raw: Mapping[str, Any]) -> bool:
    # 0.5.14 on also turn decode graphs off with --cuda-graph-backend-decode disabled.
    return bool(raw.get("disable_cuda_graph")) or raw.get("cuda_graph_backend_decode") == "disabled"


def _attn_dp_size(raw: Mapping[str, Any], tp_size: int) -> int:
    width = _int(raw, "attn_dp_size")
    # --enable-dp-attention --dp-size N: releases with --attn-dp-size (default 1) read it as N too.
    if (width is None or width == 1) and raw.get("enable_dp_attention"):
        width = _int(raw, "dp_size")
    # Attention DP of width 1, or wider than the tensor parallelism, is no attention DP.
    return width if width is not None and 1 < width <= tp_size else 1


def launch_from_args(raw: Mapping[str, Any], environment: Mapping[str, str] | None = None) -> Launch:
    """The ``Launch`` of a parsed command line (its namespace as a dict, any release's dests)."""
    tp_size = _int(raw, "tp_size") or 1
    graph_bs = _get(raw, "cuda_graph_bs")
    speculative = _get(raw, "speculative_algorithm")
    env = environment or {}
    return Launch(
        tp_size=tp_size,
        pp_size=_int(raw, "pp_size") or 1,
        attn_dp_size=_attn_dp_size(raw, tp_size),
        mem_fraction_static=_get(raw, "mem_fraction_static"),
        chunked_prefill_size=_int(raw, "chunked_prefill_size"),
        max_prefill_tokens=_int(raw, "max_prefill_tokens"),
        cuda_graph_max_bs=_int(raw, "cuda_graph_max_bs"),
        cuda_graph_bs=tuple(int(bs) for bs in graph_bs) if graph_bs else None,
        cuda_graph_disabled=_graphs_disabled(raw),
        disable_cuda_graph_padding=bool(raw.get("disable_cuda_graph_padding")),
        max_running_requests=_int(raw, "max_running_requests"),
        max_total_tokens=_int(raw, "max_total_tokens"),
        page_size=_int(raw, "page_size"),
        context_length=_int(raw, "context_length"),
        kv_cache_dtype=str(raw.get("kv_cache_dtype") or "auto"),
        speculative_algorithm=str(speculative) if speculative else None,
        speculative_num_draft_tokens=_int(raw, "speculative_num_draft_tokens"),
        enable_piecewise_cuda_graph=bool(raw.get("enable_piecewise_cuda_graph")),
        moe_a2a_backend=str(raw.get("moe_a2a_backend") or "none"),
        disaggregation_mode=str(raw.get("disaggregation_mode") or "null"),
        environment=tuple(sorted((k, v) for k, v in env.items() if k in MEMORY_ENVIRONMENT)),
    )


def launch_from_argv(release: str, argv: list[str], environment: Mapping[str, str] | None = None) -> Launch:
    """The ``Launch`` of ``argv`` (after ``-m sglang.launch_server``) for ``release``.

    Raises ``SystemExit`` (argparse's) when the release's parser refuses the argv.
    """
    return launch_from_args(vars(parser(release).parse_args(argv)), environment)
