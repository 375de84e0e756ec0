"""Runs in the child interpreter (``_execute_pools``, ``_execute_child``): models of linear attention
or state-space layers beside attention (Qwen3-Next, Nemotron-H, Jamba, Kimi-Linear, ...).

A release pools their recurrent state apart from the KV cache, and it recognises them by its own
config classes (``isinstance``) that the transformers loader builds; the stand-in ``config.json``
is none of them, so the release's pool code would size such a model as attention on every layer.
Rather than answer that, the pool code is not run for them, and the plan says so.
"""

from __future__ import annotations

from typing import Any

__all__ = ["linear_layers"]

_ATTENTION_LAYERS = frozenset({"full_attention", "sliding_attention", "attention", "chunked_attention"})
_LINEAR_KEYS = (
    "full_attention_interval",
    "linear_num_value_heads",
    "linear_attn_config",
    "hybrid_override_pattern",
    "ssm_state_size",
    "mamba_d_state",
    "attn_layer_period",
)


def _value(config: Any, key: str) -> Any:
    try:
        return getattr(config, key)
    except AttributeError:
        return None


def linear_layers(hf_config: Any) -> str | None:
    """Why the release's pool code is not run for this model (its config's linear-attention or
    state-space keys), or None for a model of attention layers only."""
    for config in (hf_config, _value(hf_config, "text_config")):
        if config is None:
            continue
        kinds = set(_value(config, "layer_types") or ()) | set(_value(config, "layers_block_type") or ())
        if kinds - _ATTENTION_LAYERS:
            found = ", ".join(sorted(kinds - _ATTENTION_LAYERS))
            return _why(f"its layer_types hold {found}")
        for key in _LINEAR_KEYS:
            if _value(config, key) is not None:
                return _why(f"its config sets {key}")
    return None


def _why(what: str) -> str:
    return (
        f"its pool code is not run for a model of linear-attention or state-space layers ({what}): the "
        "release pools their state apart from the KV cache, by config classes the stand-in config.json "
        "is none of"
    )
