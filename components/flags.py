"""SGLang launch flags as typed data, and the one place they become the argv of a release.

A field's name is SGLang's own (``speculative_num_steps`` is ``--speculative-num-steps``). Where
releases spell a flag differently (``tensor_parallel_size`` until 0.5.13, ``tp_size`` from 0.5.14),
``sglang_flags.renames`` says so, and each release's table picks the spelling it has.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from components.errors import FlagError
from sglang_flags import Flag, FlagTable, load_table, nearest_releases
from sglang_flags.renames import flag_for, spellings

__all__ = [
    "ExtraFlagValue",
    "FlagProblem",
    "ServerFlags",
    "flag_problems",
    "render_argv",
    "render_command",
    "resolve_flag",
]

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

ExtraFlagValue = str | int | float | bool | list[str | int | float]
"""A value for a flag without a typed field: a switch (bool), a scalar, or a list for nargs flags."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

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


class ServerFlags(BaseModel):
    """SGLang launch flags, one typed field per flag this workflow tunes, named as SGLang names them.

    A field left unset (``None``, or ``False`` for a switch) is not rendered, so SGLang applies its
    own default. ``model_path`` and ``speculative_draft_model_path`` may stay unset in a stack file:
    the stack spec fills them from its ``model`` and ``draftModel`` sections.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

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

    extra_flags: dict[str, ExtraFlagValue] = Field(default_factory=dict)
    """Any other flag, keyed by its dest (``schedule_policy``) or long option (``--schedule-policy``),
    checked against the target release's table when rendered."""

    @field_validator("extra_flags")
    @classmethod
    def _no_typed_flag_in_extras(cls, extra: dict[str, ExtraFlagValue]) -> dict[str, ExtraFlagValue]:
        typed = set(cls.model_fields) - {"extra_flags"}
        clashes = [k for k in extra if _field_name(k) in typed]
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


@dataclass(frozen=True)
class FlagProblem:
    """One reason a flag cannot be rendered for a release: the key, its value, and the fix."""

    key: str
    """The field name or extra-flag key as the stack spells it."""
    value: object
    """The value that cannot be rendered."""
    message: str
    """What is wrong, as a sentence."""
    fix: str
    """What to do about it, as a sentence."""

    def sentence(self) -> str:
        """Message and fix together."""
        return f"{self.message} {self.fix}"


class _Unrenderable(Exception):
    """A flag problem on its way to a FlagProblem or a FlagError."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message} {fix}")
        self.message = message
        self.fix = fix


def _field_name(key: str) -> str:
    """The typed field a key means: ``--tensor-parallel-size`` and ``tp_size`` both mean ``tp_size``."""
    name = key.removeprefix("--").replace("-", "_")
    return next((s for s in spellings(name) if s in ServerFlags.model_fields), name)


def _table(release: str) -> FlagTable:
    try:
        return load_table(release)
    except KeyError:
        raise _Unrenderable(
            f"There is no flag table for SGLang {release!r}.",
            f"Use the nearest release with one ({' or '.join(nearest_releases(release))}), or add a "
            f"table with python -m sglang_flags.regenerate {release}.",
        ) from None


def _nearest(key: str, table: FlagTable) -> list[str]:
    names = [f.dest for f in table.flags] + table.option_strings()
    return difflib.get_close_matches(key, names, n=3, cutoff=0.6)


def _resolve(key: str, release: str) -> Flag:
    table = _table(release)
    flag = table.by_option(key) if key.startswith("-") else flag_for(table, key)
    if flag is not None:
        return flag
    near = _nearest(key, table)
    hint = f" The nearest names are {', '.join(near)}." if near else ""
    raise _Unrenderable(
        f"SGLang {release} has no launch flag {key!r}.{hint}",
        "Use a flag from that release's table, or remove it.",
    )


def resolve_flag(key: str, release: str) -> Flag:
    """The release's flag for ``key`` (a field name, dest or exact long option), renames applied.

    Raises FlagError naming the nearest real names when the release has no such flag.
    """
    try:
        return _resolve(key, release)
    except _Unrenderable as problem:
        raise FlagError(str(problem)) from None


def _render_value(key: str, value: object, flag: Flag, release: str) -> list[str]:
    """The argv words for one flag; raises _Unrenderable when the value does not suit the flag."""
    option = flag.long_name
    where = f"{key}={value!r}: {option} on SGLang {release}"
    if flag.action == "BooleanOptionalAction":
        if not isinstance(value, bool):
            raise _Unrenderable(f"{where} is a switch.", "Set true or false.")
        negative = next((f for f in flag.flags if f.startswith("--no-")), None)
        if value:
            return [option]
        return [negative] if negative else []
    if flag.action in _SWITCH_ACTIONS or flag.nargs == 0:
        if not isinstance(value, bool):
            raise _Unrenderable(
                f"{where} is a switch and takes no value.", "Set true to pass it or false to leave it out."
            )
        return [option] if value else []
    if isinstance(value, bool):
        raise _Unrenderable(f"{where} takes a value, not true/false.", "Give the value itself.")
    if isinstance(value, list) and flag.nargs not in ("+", "*"):
        raise _Unrenderable(f"{where} takes one value, not a list.", "Give a single value.")
    values = value if isinstance(value, list) else [value]
    if not values and flag.nargs == "+":
        raise _Unrenderable(f"{where} needs at least one value.", "Give one or more values.")
    words = [_render_scalar(where, v, flag) for v in values]
    if len(words) == 1 and words[0].startswith("-"):
        # A value that looks like an option must be attached, or argparse reads it as one.
        return [f"{option}={words[0]}"]
    return [option, *words]


def _render_scalar(where: str, value: object, flag: Flag) -> str:
    if flag.type == "int" and (not isinstance(value, int) or isinstance(value, bool)):
        raise _Unrenderable(f"{where} takes an integer.", "Give a whole number.")
    if flag.type == "float" and (not isinstance(value, int | float) or isinstance(value, bool)):
        raise _Unrenderable(f"{where} takes a number.", "Give a number.")
    word = str(value)
    if flag.choices is not None and word not in {str(c) for c in flag.choices}:
        allowed = ", ".join(str(c) for c in flag.choices)
        raise _Unrenderable(
            f"{where} accepts only: {allowed}.", "Pick one of those, or target a release that has this value."
        )
    return word


def _collect(flags: ServerFlags, release: str) -> tuple[list[str], list[FlagProblem]]:
    argv: list[str] = []
    problems: list[FlagProblem] = []
    try:
        _table(release)
    except _Unrenderable as problem:
        return argv, [FlagProblem(key="release", value=release, message=problem.message, fix=problem.fix)]
    rendered_by: dict[str, str] = {}
    items: list[tuple[str, object]] = list(flags.typed_values().items())
    items += sorted(flags.extra_flags.items())
    for key, value in items:
        if value is False and key in type(flags).model_fields:
            continue  # an unset typed switch renders as nothing, whatever the release calls it
        try:
            flag = _resolve(key, release)
            if flag.dest in rendered_by:
                raise _Unrenderable(
                    f"{key} and {rendered_by[flag.dest]} are the same SGLang {release} flag "
                    f"({flag.long_name}).",
                    "Keep one of them.",
                )
            rendered_by[flag.dest] = key
            argv += _render_value(key, value, flag, release)
        except _Unrenderable as problem:
            problems.append(FlagProblem(key=key, value=value, message=problem.message, fix=problem.fix))
    if flags.model_path is None:
        problems.append(
            FlagProblem(
                key="model_path",
                value=None,
                message="No model path is set.",
                fix="Set model.path in the stack, or server.model_path.",
            )
        )
    return argv, problems


def flag_problems(flags: ServerFlags, release: str) -> list[FlagProblem]:
    """Every reason ``flags`` cannot be rendered for ``release``; empty when it can."""
    return _collect(flags, release)[1]


def render_argv(flags: ServerFlags, release: str) -> list[str]:
    """The argv after ``python -m sglang.launch_server`` that ``release`` accepts.

    Canonical long option names, renamed flags mapped to the release's spelling, values checked
    against the release's table. Raises FlagError listing every flag that cannot be rendered.
    """
    argv, problems = _collect(flags, release)
    if problems:
        lines = "\n".join(f"  - {p.key}: {p.sentence()}" for p in problems)
        raise FlagError(f"The launch flags cannot be rendered for SGLang {release}:\n{lines}")
    return argv


def render_command(
    flags: ServerFlags,
    release: str,
    python: str = "python",
    env: Mapping[str, str] | None = None,
) -> str:
    """One shell-safe command line: ``[VAR=value ...] python -m sglang.launch_server <argv>``.

    Values are quoted for a POSIX shell; a variable name that is not one raises FlagError.
    """
    bad_names = [name for name in (env or {}) if not _ENV_NAME.match(name)]
    if bad_names:
        raise FlagError(
            f"{', '.join(map(repr, bad_names))} cannot be environment variable names. "
            f"Use letters, digits and _, not starting with a digit."
        )
    assignments = [f"{name}={shlex.quote(value)}" for name, value in (env or {}).items()]
    words = [python, "-m", "sglang.launch_server", *render_argv(flags, release)]
    return " ".join([*assignments, shlex.join(words)])
