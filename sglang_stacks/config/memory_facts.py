"""What the memory plan of a stack is made of: its launch as the release reads it, its model, its GPU.

The launch is the stack's own argv for the release, parsed by that release's flag table, the way
the server (and the emulator) read it. The model and the GPU are the stack's declared facts, the
KV cell and the context of the ``config.json`` it names where it declares none; on
the emulator host, what the stack does not declare (the KV cell, the context length, what graphs
and activations take, the driver's and the runtime's memory) is the emulator profile's, the same
facts the emulated server plans with, so preflight and the emulator agree.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from sglang_emulator.profile import Profile, ProfileError
from sglang_emulator.profile_loading import load_profile, shipped_profiles
from sglang_emulator.world import device_facts, model_facts
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.sections import KvCacheSpec
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import FlagError
from sglang_world import DeviceFacts, DraftFacts, KvCell, Launch, ModelFacts, Workload
from sglang_world.facts import memory_source
from sglang_world.launch import launch_from_argv
from sglang_world.models import config_context_length, config_kv_cell

__all__ = ["emulator_profile", "stack_device", "stack_launch", "stack_model", "stack_workload"]


@cache
def _shipped(name: str) -> Profile | None:
    try:
        return load_profile(name)
    except ProfileError:
        return None


def emulator_profile(spec: StackSpec) -> Profile | None:
    """The emulator profile that plays the host, when it ships with the emulator (a profile the
    stack names by path lives on the host and is not read here)."""
    if spec.runtime != "emulator":
        return None
    name = spec.environment.emulator.profile
    return _shipped(name) if name in shipped_profiles() else None


def stack_launch(spec: StackSpec, release: str) -> Launch | None:
    """The stack's launch as ``release`` reads it; None when its flags cannot be rendered for it
    (preflight reports why)."""
    try:
        argv = render_argv(spec.launch_flags(), release)
        return launch_from_argv(release, argv, spec.environment.env)
    except (FlagError, SystemExit):
        return None


def stack_model(spec: StackSpec, pp_size: int = 1) -> ModelFacts:
    """The model on one GPU: the stack's declared weights, draft and vision tower; its KV cell and
    context as declared, else as the ``config.json`` it names (``model.config``) gives them; the rest
    from the emulator's profile on the emulator host. A model's total weights are spread over the
    tensor-parallel GPUs of each of ``pp_size`` pipeline stages (one stage's share of the layers)."""
    tp = spec.tp_size * pp_size
    declared = spec.model
    vision = None
    if declared.vision_num_layers is not None and declared.vision_hidden_size is not None:
        vision = (declared.vision_num_layers, declared.vision_hidden_size)
    profile = emulator_profile(spec)
    config = declared.hf_config()
    base = model_facts(profile, tp) if profile is not None else ModelFacts(weights_gib=0.0)
    draft = base.draft
    if spec.draft_model is not None:
        weights = spec.draft_model.weights_gb / tp
        draft = replace(draft, weights_gib=weights) if draft is not None else DraftFacts(weights_gib=weights)
    # What the stack declares wins over the profile's.
    return replace(
        base,
        weights_gib=declared.weights_gb_per_gpu(tp),
        # A stack that does not declare a vision tower has the profile's on the emulator host, as
        # the emulator serving it does: its automatic fraction and KV pool are the emulator's.
        vision=vision if vision is not None else base.vision,
        draft=draft,
        kv=_kv_cell(declared.kv_cache) or (config_kv_cell(config) if config else None) or base.kv,
        context_length=declared.context_length
        or (config_context_length(config) if config else None)
        or base.context_length,
        cuda_graph_mib_per_size=_first(declared.cuda_graph_mib_per_batch_size, base.cuda_graph_mib_per_size),
        activation_mib_per_token=_first(
            declared.activation_mib_per_prefill_token, base.activation_mib_per_token
        ),
    )


def _first(declared: float | None, known: float | None) -> float | None:
    return declared if declared is not None else known


def _kv_cell(spec: KvCacheSpec | None) -> KvCell | None:
    if spec is None:
        return None
    if spec.attention == "mla":
        return KvCell("mla", spec.layers, latent_dim=spec.latent_dim or 0)
    return KvCell("mha", spec.layers, kv_heads=spec.kv_heads or 0, head_dim=spec.head_dim or 0)


def stack_device(spec: StackSpec) -> DeviceFacts:
    """One of the host's GPUs: its declared memory; the driver's and the runtime's share from the
    emulator's profile on the emulator host, else as measured on a real GPU (``sglang_world``), and
    for a GPU model that was not measured, that measurement assumed, which the plan says."""
    profile = emulator_profile(spec)
    if profile is not None:
        return replace(device_facts(profile), total_mib=spec.host.memory_per_gpu_mib)
    return DeviceFacts(
        total_mib=spec.host.memory_per_gpu_mib, memory_source=memory_source(spec.host.gpu_model)
    )


def stack_workload(spec: StackSpec) -> Workload:
    """What the stack's benchmark will ask of the server."""
    bench = spec.benchmark
    return Workload(bench.input_len, bench.output_len, max(bench.concurrency))
