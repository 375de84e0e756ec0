"""A profile's physical facts as ``sglang_world`` reads them: the GPU, the model on it, the draft.

The profile says what the hardware and the model are (memory, the driver's reserve, weights, the
KV cell's shape, what graphs and activations take); everything SGLang decides from them comes from
``sglang_world``, the same model preflight plans with.
"""

from __future__ import annotations

from sglang_emulator.profile import KvCellSpec, Profile, ProfileError
from sglang_world import DeviceFacts, DraftFacts, KvCell, ModelFacts

__all__ = ["device_facts", "kv_cell", "model_facts"]


def kv_cell(spec: KvCellSpec, where: str) -> KvCell:
    """The KV cell a profile's ``kv_cell`` describes; ProfileError naming the key when it is wrong."""
    if spec.attention == "mla" and spec.latent_dim > 0 and spec.layers > 0:
        return KvCell("mla", spec.layers, latent_dim=spec.latent_dim)
    if spec.attention == "mha" and min(spec.kv_heads, spec.head_dim, spec.layers) > 0:
        return KvCell("mha", spec.layers, kv_heads=spec.kv_heads, head_dim=spec.head_dim)
    raise ProfileError(
        f"Profile key {where!r} must describe mla attention (layers, latent_dim) or mha attention "
        f"(layers, kv_heads, head_dim), got {spec}. Fix the profile."
    )


def model_facts(profile: Profile, tp_size: int) -> ModelFacts:
    """The profile's model on one of ``tp_size`` GPUs (a pipeline's: tp x pp, each stage holding its
    share of the layers)."""
    model, draft, memory = profile.model, profile.draft_model, profile.memory
    vision = model.vision_tower
    if vision and len(vision) != 2:
        raise ProfileError(
            f"Profile key 'model.vision_tower' must be [layers, hidden_size], got {vision}. Fix the profile."
        )
    return ModelFacts(
        weights_gib=model.weights_gib_total / tp_size,
        kv=kv_cell(model.kv_cell, "model.kv_cell"),
        context_length=model.context_length,
        vision=(vision[0], vision[1]) if vision else None,
        cuda_graph_mib_per_size=memory.cuda_graph_mib_per_graph,
        activation_mib_per_token=memory.activation_mib_per_prefill_token,
        draft=DraftFacts(
            weights_gib=draft.weights_gib_total / tp_size,
            kv=kv_cell(draft.kv_cell, "draft_model.kv_cell"),
            cuda_graph_mib_per_size=memory.draft_cuda_graph_mib_per_graph,
        ),
    )


def device_facts(profile: Profile, others_mib: float = 0.0) -> DeviceFacts:
    """One of the profile's GPUs, with ``others_mib`` held by other processes."""
    return DeviceFacts(
        total_mib=profile.host.memory_total_mib,
        driver_reserved_mib=profile.host.memory_reserved_mib,
        runtime_mib=profile.memory.runtime_overhead_gib * 1024,
        memory_source=profile.memory.runtime_overhead_source,
        others_mib=others_mib,
    )
