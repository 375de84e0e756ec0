"""Public models' ``config.json`` facts, as SGLang reads them to decide memory.

A stack names its model's configuration (``model.config``): one of these by name, or a
``config.json`` file. With it, preflight runs the release's own ``ServerArgs`` on the stack's launch
command (``execute.py``); the grid's stand-in models are built from the same facts (``grid.py``).
Only the keys a release's memory and parallelism code reads are kept; the values are each model's
published ``config.json``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from sglang_world.kv import KvCell

__all__ = ["PUBLIC_MODELS", "config_context_length", "config_kv_cell", "public_model", "read_model_config"]

KIMI_K2_TEXT: dict[str, Any] = {
    "model_type": "deepseek_v3",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 262144,
    "vocab_size": 163840,
    "rope_theta": 50000.0,
    "rope_scaling": None,
    "torch_dtype": "bfloat16",
}
"""Kimi-K2's text model (DeepSeek-V3's architecture: 384 experts, 64 heads), Kimi-K2.5's context."""

LLAMA_3_1_8B: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 131072,
    "vocab_size": 128256,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
}

_KIMI_K2_5: dict[str, Any] = {
    "model_type": "kimi_k25",
    "architectures": ["KimiK25ForConditionalGeneration"],
    "text_config": KIMI_K2_TEXT,
    # The file names the tower's sizes with a vt_ prefix; SGLang reads the vision config through
    # its own KimiK25VisionConfig (0.5.23), which presents them as num_hidden_layers and hidden_size.
    "vision_config": {
        "patch_size": 14,
        "vt_num_hidden_layers": 27,
        "vt_hidden_size": 1152,
        "num_hidden_layers": 27,
        "hidden_size": 1152,
    },
    "torch_dtype": "bfloat16",
}

_DEEPSEEK_V3: dict[str, Any] = {
    **KIMI_K2_TEXT,
    "n_routed_experts": 256,
    "n_group": 8,
    "topk_group": 4,
    "routed_scaling_factor": 2.5,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 163840,
    "vocab_size": 129280,
    "rope_theta": 10000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "quantization_config": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": [128, 128],
    },
}

_QWEN3_30B_A3B: dict[str, Any] = {
    "model_type": "qwen3_moe",
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "norm_topk_prob": True,
    "max_position_embeddings": 40960,
    "vocab_size": 151936,
    "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16",
}

_GPT_OSS_120B: dict[str, Any] = {
    "model_type": "gpt_oss",
    "architectures": ["GptOssForCausalLM"],
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 36,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "experts_per_token": 4,
    # Sliding-window attention (128 tokens) on the even layers, full attention on the odd ones.
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072,
    "initial_context_length": 4096,
    "vocab_size": 201088,
    "rope_theta": 150000,
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
    },
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    },
}

PUBLIC_MODELS: dict[str, dict[str, Any]] = {
    "kimi-k2.5": _KIMI_K2_5,
    "deepseek-v3": _DEEPSEEK_V3,
    "llama-3.1-8b": LLAMA_3_1_8B,
    "qwen3-30b-a3b": _QWEN3_30B_A3B,
    "gpt-oss-120b": _GPT_OSS_120B,
}
"""Kimi-K2.5 (the seeds' model), DeepSeek-V3, Llama-3.1-8B-Instruct, Qwen3-30B-A3B and gpt-oss-120b
(a hybrid of sliding-window and full attention layers, which SGLang pools apart)."""


def public_model(name: str) -> dict[str, Any]:
    """A copy of the named model's ``config.json`` facts (``KeyError`` for a name not shipped)."""
    return copy.deepcopy(PUBLIC_MODELS[name])


def read_model_config(path: str) -> dict[str, Any]:
    """A ``config.json`` file's object; ``ValueError`` saying why when it is not one."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON: {error}") from None
    if not isinstance(value, dict) or not isinstance(value.get("architectures"), list):
        raise ValueError(f"{path} is not a model's config.json: it has no list of architectures")
    return value


def _text(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a ``config.json`` (a multimodal model's ``text_config``)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def config_kv_cell(config: dict[str, Any]) -> KvCell | None:
    """The KV cell a ``config.json`` describes, the way SGLang's model config reads it: multi-head
    latent attention (a ``kv_lora_rank``) keeps ``kv_lora_rank + qk_rope_head_dim`` per layer; else
    a key and a value of ``head_dim`` (``hidden_size / num_attention_heads`` when not given) per KV
    head. None when the file lacks what either needs. What the plan sizes the pool with when the
    release's own code cannot run."""
    text = _text(config)
    layers = _positive(text.get("num_hidden_layers"))
    dtype = str(text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
    if layers is None:
        return None
    rank, rope = _positive(text.get("kv_lora_rank")), _positive(text.get("qk_rope_head_dim"))
    if rank is not None and rope is not None:
        return KvCell("mla", layers, latent_dim=rank + rope, dtype=dtype)
    heads = _positive(text.get("num_attention_heads"))
    kv_heads = _positive(text.get("num_key_value_heads")) or heads
    hidden = _positive(text.get("hidden_size"))
    head_dim = _positive(text.get("head_dim")) or (hidden // heads if hidden and heads else None)
    if kv_heads is None or head_dim is None:
        return None
    return KvCell("mha", layers, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype)


def config_context_length(config: dict[str, Any]) -> int | None:
    """The context length a ``config.json`` gives (``max_position_embeddings``); None without one."""
    return _positive(_text(config).get("max_position_embeddings"))
