"""The stack spec's model sections: the target model (where it is, its weights per GPU, and the facts
the memory plan sizes the KV pool and what is beside it with) and the speculative-decoding draft.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sglang_stacks.config.docstrings import FileSection
from sglang_world.models import PUBLIC_MODELS, public_model, read_model_config

__all__ = ["DraftModelSpec", "KvCacheSpec", "ModelSpec"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NO_CONTROL = r"^[^\x00-\x1f\x7f]+$"


class KvCacheSpec(FileSection):
    """The attention shape that sizes the model's KV cache (from its ``config.json``)."""

    attention: Literal["mha", "mla"]
    """``mha``: a key and a value per KV head and layer, split over the GPUs; ``mla`` (DeepSeek-V3,
    Kimi-K2.5): one latent per layer on every GPU."""
    layers: int = Field(ge=1)
    """Layers that keep a KV cache (``num_hidden_layers``)."""
    kv_heads: int | None = Field(default=None, ge=1)
    """``mha``: ``num_key_value_heads``."""
    head_dim: int | None = Field(default=None, ge=1)
    """``mha``: the size of one key or value (``head_dim``)."""
    latent_dim: int | None = Field(default=None, ge=1)
    """``mla``: ``kv_lora_rank + qk_rope_head_dim`` (576 for Kimi-K2.5)."""

    @model_validator(mode="after")
    def _shape_of_its_kind(self) -> KvCacheSpec:
        if self.attention == "mha" and (self.kv_heads is None or self.head_dim is None):
            raise ValueError("mha attention needs kv_heads and head_dim")
        if self.attention == "mla" and self.latent_dim is None:
            raise ValueError("mla attention needs latent_dim (kv_lora_rank + qk_rope_head_dim)")
        return self


class ModelSpec(FileSection):
    """The target model: where it is on the host, how much memory its weights take per GPU, and
    the facts the memory plan sizes the KV pool and what is beside it with."""

    path: str = Field(min_length=1, pattern=_NO_CONTROL)
    """Model folder on the host (or hub id); the server's ``model_path`` unless that is set."""
    weights_per_gpu_gb: float | None = Field(default=None, gt=0)
    """Weights each GPU holds, in GB as SGLang prints them (``Load weight end ... mem usage``)."""
    total_weights_gb: float | None = Field(default=None, gt=0)
    """All weights together; divided by the tensor-parallel size when ``weights_per_gpu_gb`` is unset."""
    vision_num_layers: int | None = Field(default=None, ge=1)
    """Multimodal models: layers of the vision tower, which SGLang uses to lower its automatic
    mem fraction (Kimi-K2.5: 27)."""
    vision_hidden_size: int | None = Field(default=None, ge=1)
    """Multimodal models: hidden size of the vision tower (Kimi-K2.5: 1152)."""
    kv_cache: KvCacheSpec | None = None
    """The attention shape that sizes the KV cache; without it, the one the ``config.json`` named by
    ``config`` gives, else on the emulator its profile's; with none of them the pool's size in tokens,
    and what follows from it, is not judged where the release's own code cannot size it."""
    context_length: int | None = Field(default=None, ge=1)
    """``max_position_embeddings``: sizes the request-to-token table; without it, the ``config.json``'s."""
    cuda_graph_mib_per_batch_size: float | None = Field(default=None, ge=0)
    """CUDA-graph memory per captured decode batch size (``Capture cuda graph end ... mem usage``
    divided by the sizes captured)."""
    activation_mib_per_prefill_token: float | None = Field(default=None, ge=0)
    """Activation memory a prefill forward takes per token."""
    config: str | None = Field(default=None, min_length=1, pattern=_NO_CONTROL)
    """The model's ``config.json`` as SGLang reads it: a public model by name (``kimi-k2.5``,
    ``deepseek-v3``, ``llama-3.1-8b``, ``qwen3-30b-a3b``, ``gpt-oss-120b``) or the path of a
    ``config.json`` file here. With it, preflight runs the release's own code on the stack's launch
    command (its settings and refusals are SGLang's); without it, the project's port of that code
    judges."""

    @field_validator("config")
    @classmethod
    def _known_config(cls, value: str | None) -> str | None:
        if value is None or value in PUBLIC_MODELS:
            return value
        if not value.endswith(".json"):
            raise ValueError(
                f"{value!r} is neither a model the project carries ({', '.join(PUBLIC_MODELS)}) nor the "
                "path of a config.json file"
            )
        read_model_config(value)
        return value

    def hf_config(self) -> dict[str, Any] | None:
        """The model's ``config.json`` facts; None when the stack names none."""
        if self.config is None:
            return None
        return public_model(self.config) if self.config in PUBLIC_MODELS else read_model_config(self.config)

    @model_validator(mode="after")
    def _one_weight_size(self) -> ModelSpec:
        if (self.weights_per_gpu_gb is None) == (self.total_weights_gb is None):
            raise ValueError("set exactly one of weights_per_gpu_gb and total_weights_gb")
        if (self.vision_num_layers is None) != (self.vision_hidden_size is None):
            raise ValueError("set both vision_num_layers and vision_hidden_size, or neither")
        return self

    def weights_gb_per_gpu(self, tp_size: int) -> float:
        """Weights per GPU at tensor-parallel size ``tp_size``."""
        if self.weights_per_gpu_gb is not None:
            return self.weights_per_gpu_gb
        assert self.total_weights_gb is not None  # guaranteed by _one_weight_size
        return self.total_weights_gb / tp_size


class DraftModelSpec(FileSection):
    """The speculative-decoding draft model (an EAGLE-3 head): its source and size."""

    source: Literal["local", "host"]
    """``local``: uploaded from ``local_path`` on this machine; ``host``: already at ``path_on_host``."""
    local_path: str | None = Field(default=None, min_length=1, pattern=_NO_CONTROL)
    """Folder on this machine to upload (source ``local`` only)."""
    path_on_host: str = Field(pattern=r"^/[^\x00-\x1f\x7f]*$")
    """Absolute folder on the host the server reads; the server's draft path unless that is set."""
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """Digest of the whole folder (sha256 of its sorted ``sha256sum`` listing); checked on the host
    before launch."""
    sha256_manifest: dict[str, str] | None = None
    """Relative file path -> sha256 hex digest; checked on the host before launch."""
    weights_gb: float = Field(gt=0)
    """The draft checkpoint's weights in GB; SGLang shards them with the target's tensor parallelism."""

    @model_validator(mode="after")
    def _source_has_its_path(self) -> DraftModelSpec:
        if self.source == "local" and self.local_path is None:
            raise ValueError("source: local needs local_path, the folder to upload")
        if self.source == "host" and self.local_path is not None:
            raise ValueError("local_path applies to source: local only; remove it or set source: local")
        bad = [name for name, digest in (self.sha256_manifest or {}).items() if not _SHA256.match(digest)]
        if bad:
            raise ValueError(f"sha256_manifest entries {', '.join(bad)} need 64 lowercase hex digits")
        return self
