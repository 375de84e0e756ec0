"""SGLang launch flags as typed data: one field per tuned flag, named as SGLang names it.

A field's name is SGLang's own (``speculative_num_steps`` is ``--speculative-num-steps``). Where
releases spell a flag differently (``tensor_parallel_size`` until 0.5.13, ``tp_size`` from 0.5.14),
``sglang_flags.renames`` says so, and each release's table picks the spelling it has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
)

from sglang_flags.renames import spellings
from sglang_stacks.config.docstrings import describe_fields
from sglang_stacks.shape import Shape

__all__ = [
    "ExtraFlagValue",
    "FlagValue",
    "LaunchFlags",
    "ServerFlags",
    "TransferBackend",
    "field_name",
    "flags_from_values",
    "launch_values",
]

FlagValue = str | int | float | bool | list[str | int | float]
"""A flag's value: a switch (bool), a scalar, or a list for nargs flags."""

SpeculativeAlgorithm = Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
"""The algorithms 0.5.8 accepts; later releases accept these too (their parser takes any string)."""

MoeA2ABackend = Literal[
    "none",
    "deepep",
    "mooncake",
    "nixl",
    "mori",
    "ascend_fuseep",
    "flashinfer",
    "megamoe",
    "deepep_v2",
    "pplx",
    "ascend_tp",
    "flashinfer_megamoe",
]
"""Every MoE all-to-all backend of the shipped releases; each release accepts its own subset."""

AttentionBackend = Literal[
    "triton",
    "torch_native",
    "flex_attention",
    "dsa",
    "nsa",
    "qsa",
    "dsv4",
    "compressed",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "llada2_cfg_flashinfer",
    "flashmla",
    "trtllm_mla",
    "cutedsl_mla",
    "tokenspeed_mla",
    "trtllm_mha",
    "dual_chunk_flash_attn",
    "hpc_ops",
    "hybrid_linear_attn",
    "minicpm_flashattn",
    "minicpm_flashinfer",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
]
"""Every attention backend of the shipped releases; each release accepts its own subset."""

TransferBackend = Literal["mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"]
"""Every KV transfer backend of prefill/decode disaggregation in the shipped releases; each release
accepts its own subset."""


def _whole_numbers_as_int(value: FlagValue) -> FlagValue:
    # Pulumi carries every number as a float: 8192 comes back as 8192.0. A whole number is the int
    # it was, so it renders, records and shows the same on both sides of the engine.
    if isinstance(value, list):
        return [int(v) if isinstance(v, float) and v.is_integer() else v for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


ExtraFlagValue = Annotated[FlagValue, AfterValidator(_whole_numbers_as_int)]
"""A value for a flag without a typed field; a whole number is an int."""

# Actions that take no value on the command line: the option alone sets them.
_SWITCH_ACTIONS = frozenset(
    {
        "_StoreTrueAction",
        "_StoreConstAction",
        "DeprecatedStoreTrueAction",
        "DeprecatedAction",
        "DeprecatedStoreConstAction",
    }
)


class ServerFlags(Shape):
    """SGLang launch flags, one typed field per flag this workflow tunes, named as SGLang names them.

    A field left unset (``None``, or ``False`` for a switch) is not rendered, so SGLang applies its
    own default. ``model_path`` and ``speculative_draft_model_path`` may stay unset in a stack file:
    the stack spec fills them from its ``model`` and ``draftModel`` sections.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=describe_fields)

    # Model
    model_path: str | None = Field(default=None, min_length=1)
    """Model weights folder on the host (or hub id); defaults to the model section's ``path``."""
    trust_remote_code: bool = False
    """Allow the model's own Python code (Kimi-K2.5 needs it)."""

    # Serving
    host: str | None = Field(default=None, min_length=1)
    """Address the HTTP server binds to; SGLang's default is 127.0.0.1."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """HTTP port; SGLang's default is 30000."""
    enable_metrics: bool = False
    """Serve Prometheus metrics on ``/metrics``."""

    # Parallelism
    tp_size: int | None = Field(default=None, ge=1, le=64)
    """Tensor-parallel size: how many GPUs shard the model (``--tensor-parallel-size`` until 0.5.13)."""
    ep_size: int | None = Field(default=None, ge=1, le=64)
    """Expert-parallel size for MoE layers (``--expert-parallel-size`` until 0.5.13)."""
    moe_a2a_backend: MoeA2ABackend | None = None
    """All-to-all backend for expert parallelism; the release's table decides which it accepts."""
    nnodes: int | None = Field(default=None, ge=1, le=64)
    """Nodes one server spans; set per node from ``fleet.nodes_per_replica``, not in a stack file."""
    node_rank: int | None = Field(default=None, ge=0, le=63)
    """This node's rank in a multi-node server (rank 0 serves HTTP); set per node by the fleet."""
    dist_init_addr: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.:_\[\]-]+:[0-9]+$")
    """``HOST:PORT`` of rank 0's rendezvous; set per node by the fleet."""

    # Memory and scheduling
    mem_fraction_static: float | None = Field(default=None, gt=0.0, lt=1.0)
    """Share of GPU memory for weights plus KV cache; unset lets SGLang derive one."""
    max_running_requests: int | None = Field(default=None, ge=1)
    """Cap on concurrently decoded requests; speculative decoding sets 48 when unset."""
    chunked_prefill_size: int | None = Field(default=None, ge=-1)
    """Tokens per prefill chunk (-1 disables chunking); sizes the activation memory."""
    num_continuous_decode_steps: int | None = Field(default=None, ge=1)
    """Decode steps run back to back before the scheduler looks again."""

    # CUDA graphs and kernels
    cuda_graph_max_bs: int | None = Field(default=None, ge=1, le=4096)
    """Largest decode batch captured as a CUDA graph (``--cuda-graph-max-bs-decode`` from 0.5.14)."""
    disable_cuda_graph: bool = False
    """Run without CUDA graphs."""
    attention_backend: AttentionBackend | None = None
    """Attention kernel backend; the release's table decides which it accepts."""

    # Collectives
    disable_custom_all_reduce: bool = False
    """Use NCCL instead of SGLang's custom all-reduce kernel (twice as fast over PCIe)."""
    enable_flashinfer_allreduce_fusion: bool = False
    """Fuse all-reduce with the following norm through FlashInfer (its JIT lacks SM120)."""
    enable_torch_symm_mem: bool = False
    """All-reduce through torch symmetric memory (its architecture table lacks SM120); from 0.5.3."""

    # Speculative decoding
    speculative_algorithm: SpeculativeAlgorithm | None = None
    """Speculative decoding algorithm; EAGLE, EAGLE3 and STANDALONE need a draft model."""
    speculative_draft_model_path: str | None = Field(default=None, min_length=1)
    """Draft model folder on the host; defaults to the draftModel section's ``path_on_host``."""
    speculative_num_steps: int | None = Field(default=None, ge=1, le=32)
    """Draft steps per verify pass."""
    speculative_eagle_topk: int | None = Field(default=None, ge=1, le=64)
    """Branching factor of the draft tree at each step."""
    speculative_num_draft_tokens: int | None = Field(default=None, ge=1, le=1024)
    """Draft tokens verified per pass."""

    # Prefill/decode disaggregation: set per host from fleet.disaggregation, not in a stack file
    disaggregation_mode: Literal["prefill", "decode"] | None = None
    """The worker's role in a disaggregated fleet; set per host from its ``role``."""
    disaggregation_transfer_backend: TransferBackend | None = None
    """How decode workers pull the KV; set from ``fleet.disaggregation.transfer_backend``."""
    disaggregation_bootstrap_port: int | None = Field(default=None, ge=1, le=65535)
    """A prefill worker's bootstrap server port; set from ``fleet.disaggregation``."""

    extra_flags: dict[str, ExtraFlagValue] = Field(default_factory=dict)
    """Any other flag, keyed by its dest (``schedule_policy``) or long option (``--schedule-policy``),
    checked against the target release's table when rendered."""

    @field_validator("extra_flags")
    @classmethod
    def _no_typed_flag_in_extras(cls, extra: dict[str, ExtraFlagValue]) -> dict[str, ExtraFlagValue]:
        typed = set(cls.model_fields) - {"extra_flags"}
        clashes = [k for k in extra if field_name(k) in typed]
        if clashes:
            names = ", ".join(sorted(clashes))
            raise ValueError(
                f"extra_flags repeats typed flags ({names}); set them as fields of the server section "
                f"instead, where their type and range are checked."
            )
        return extra

    def typed_values(self) -> dict[str, object]:
        """The typed fields that are set (not ``None``), in declaration order."""
        return {
            name: value
            for name in type(self).model_fields
            if name != "extra_flags" and (value := getattr(self, name)) is not None
        }


def field_name(key: str) -> str:
    """The typed field a key means: ``--tensor-parallel-size`` and ``tp_size`` both mean ``tp_size``."""
    name = key.removeprefix("--").replace("-", "_")
    return next((s for s in spellings(name) if s in ServerFlags.model_fields), name)


def _typed_names() -> frozenset[str]:
    return frozenset(ServerFlags.model_fields) - {"extra_flags"}


def launch_values(flags: ServerFlags) -> dict[str, FlagValue]:
    """The flags as the stack's state, its outputs and the host's notes record them: canonical
    name -> value, typed fields in declaration order, then the other flags by name. Unset fields and
    switches that are off are left out, as they render to nothing."""
    values: dict[str, FlagValue] = {}
    for name, value in flags.typed_values().items():
        if value is not False:
            values[name] = value  # type: ignore[assignment]
    for key, value in sorted(flags.extra_flags.items()):
        values[key] = value
    return values


def _fields_of(values: Mapping[str, object]) -> dict[str, object]:
    typed = _typed_names()
    return {
        **{key: value for key, value in values.items() if key in typed},
        "extra_flags": {key: value for key, value in values.items() if key not in typed},
    }


def flags_from_values(values: Mapping[str, object]) -> ServerFlags:
    """Typed flags from a recorded `launch_values` map: typed names to their fields, the rest to
    ``extra_flags``."""
    return ServerFlags.model_validate(_fields_of(values))


def _from_launch_values(value: object) -> object:
    if isinstance(value, Mapping) and "extra_flags" not in value:
        return _fields_of(value)
    return value


LaunchFlags = Annotated[ServerFlags, BeforeValidator(_from_launch_values), PlainSerializer(launch_values)]
"""The launch flags of one server, as they travel from the stack file to the host: the typed
`ServerFlags` (the model path filled, other flags keyed by their canonical name), recorded in the
state, the outputs and the host's serving note as its `launch_values` map. They become an argv
once, where the server is launched (`config.render.render_command`)."""
