"""SGLang's flag renames, declared once: each pair is one flag under its older and newer dest.

A stack names a flag once (``tp_size``, ``cuda_graph_max_bs``); each release's table decides which
spelling it has. Only renames that keep the value's meaning are here: SGLang's own deprecated
aliases (``--cuda-graph-max-bs`` parsed into ``cuda_graph_max_bs_decode`` in 0.5.14), and a flag
that disappears in the very release its successor appears with the same type and help text
(``--oltp-traces-endpoint``, a typo, became ``--otlp-traces-endpoint``). A switch that became a
value (``--enforce-piecewise-cuda-graph`` into ``--cuda-graph-backend-prefill tc_piecewise``) is not
a rename. ``tests/test_renames.py`` checks every pair against the tables.
"""

from __future__ import annotations

from sglang_flags import Flag, FlagTable

__all__ = ["RENAMES", "flag_for", "spellings"]

RENAMES: tuple[tuple[str, str], ...] = (
    ("max_micro_batch_size", "pp_max_micro_batch_size"),  # 0.5.3.post1
    ("oltp_traces_endpoint", "otlp_traces_endpoint"),  # 0.5.4.post2
    ("kt_amx_weight_path", "kt_weight_path"),  # 0.5.5.post1
    ("kt_amx_method", "kt_method"),  # 0.5.5.post1
    ("stream_output", "incremental_streaming_output"),  # 0.5.10
    ("speculative_dflash_draft_window_size", "speculative_draft_window_size"),  # 0.5.12
    ("nsa_prefill_backend", "dsa_prefill_backend"),  # 0.5.13
    ("nsa_decode_backend", "dsa_decode_backend"),  # 0.5.13
    ("enable_nsa_prefill_context_parallel", "enable_dsa_prefill_context_parallel"),  # 0.5.13
    ("nsa_prefill_cp_mode", "dsa_prefill_cp_mode"),  # 0.5.13
    ("tensor_parallel_size", "tp_size"),  # 0.5.14: the argparse dest took ServerArgs' name
    ("expert_parallel_size", "ep_size"),  # 0.5.14
    ("data_parallel_size", "dp_size"),  # 0.5.14
    ("pipeline_parallel_size", "pp_size"),  # 0.5.14
    ("attention_context_parallel_size", "attn_cp_size"),  # 0.5.14
    ("moe_data_parallel_size", "moe_dp_size"),  # 0.5.14
    ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"),  # 0.5.14: split by phase, the old one was decode
    ("cuda_graph_bs", "cuda_graph_bs_decode"),  # 0.5.14
    ("piecewise_cuda_graph_max_tokens", "cuda_graph_max_bs_prefill"),  # 0.5.14
    ("piecewise_cuda_graph_tokens", "cuda_graph_bs_prefill"),  # 0.5.14
    ("piecewise_cuda_graph_compiler", "cuda_graph_tc_compiler"),  # 0.5.14
    ("mamba_scheduler_strategy", "mamba_radix_cache_strategy"),  # 0.5.14
    ("grpc_http_sidecar_port", "smg_http_sidecar_port"),  # 0.5.16
    ("enable_gdn_replayssm_spec", "enable_linear_replayssm_spec"),  # 0.5.17
)
"""(older dest, newer dest), in the order SGLang renamed them."""


def spellings(name: str) -> tuple[str, ...]:
    """Every dest the flag ``name`` has had, oldest first; ``(name,)`` for a flag never renamed."""
    chain = [name]
    changed = True
    while changed:
        changed = False
        for old, new in RENAMES:
            if old == chain[-1] and new not in chain:
                chain.append(new)
                changed = True
            elif new == chain[0] and old not in chain:
                chain.insert(0, old)
                changed = True
    return tuple(chain)


def flag_for(table: FlagTable, name: str) -> Flag | None:
    """The release's own flag for ``name`` under whichever spelling the release has, or ``None``."""
    for dest in (name, *spellings(name)):
        flag = table.by_dest(dest)
        if flag is not None:
            return flag
    return None
