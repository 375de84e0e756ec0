"""A model's KV cache cell: the bytes one token takes in the KV pool of one GPU.

Multi-head attention keeps a key and a value per KV head and layer, and tensor parallelism splits
the heads over the GPUs. Multi-head latent attention (DeepSeek-V3, Kimi-K2.5) keeps one latent
(``kv_lora_rank + qk_rope_head_dim``) per layer that every GPU holds whole. The element size
follows ``--kv-cache-dtype``: ``auto`` is the model's own dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["KV_DTYPE_BYTES", "KvCell", "kv_element_bytes"]

KV_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
"""Bytes per element of each ``--kv-cache-dtype`` the model plans (besides ``auto``)."""


@dataclass(frozen=True)
class KvCell:
    """The attention shape that sizes the KV cache."""

    attention: Literal["mha", "mla"]
    """``mha`` (keys and values per KV head) or ``mla`` (one latent per layer)."""
    layers: int
    """Layers that keep a KV cache."""
    kv_heads: int = 0
    """KV heads of the whole model (``mha``); split over the tensor-parallel GPUs."""
    head_dim: int = 0
    """Size of one key (and one value) per head (``mha``)."""
    latent_dim: int = 0
    """``kv_lora_rank + qk_rope_head_dim`` (``mla``: 512 + 64 for DeepSeek-V3 and Kimi-K2.5)."""
    dtype: str = "bfloat16"
    """The model's own dtype, which ``--kv-cache-dtype auto`` keeps."""

    def stage(self, pp_size: int) -> KvCell:
        """The cell of a pipeline's largest stage: SGLang splits the layers over ``pp_size`` stages
        as evenly as they go (the last stages one more), and the stages keep the smallest pool,
        the one of the stage with the most layers."""
        return self if pp_size == 1 else replace(self, layers=-(-self.layers // pp_size))

    def bytes_per_token(self, attn_tp_size: int = 1, kv_cache_dtype: str = "auto") -> int | None:
        """One token's KV on one GPU of an attention tensor-parallel group of ``attn_tp_size`` (the
        tensor parallelism over the attention DP width); None for a cache dtype the model does not
        plan (fp4)."""
        element = kv_element_bytes(self.dtype if kv_cache_dtype == "auto" else kv_cache_dtype)
        if element is None:
            return None
        if self.attention == "mla":
            return int(self.latent_dim * self.layers * element)
        # Heads are split over the attention group's GPUs; a GPU never holds less than one.
        heads = max(self.kv_heads // attn_tp_size, 1)
        return int(heads * self.head_dim * 2 * self.layers * element)


def kv_element_bytes(dtype: str) -> float | None:
    """Bytes per KV element of ``dtype``; None when the model does not plan that dtype."""
    return KV_DTYPE_BYTES.get(dtype)
