"""The stack spec: one typed, frozen model of a stack's config, read once and validated at the boundary.

A stack file holds one config key per section (``sglang-stacks:host``, ``sglang-stacks:server``, ...);
inside a section every key is snake_case, and server flags carry SGLang's own names. Secrets
(``sshPrivateKey``, ``hubToken``) are Pulumi secrets and never part of the spec.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sglang_flags import known_releases, nearest_releases
from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.config.names import is_env_name
from sglang_stacks.errors import SpecError

__all__ = [
    "CONFIG_NAMESPACE",
    "EMULATOR_HOST_FACTS",
    "SECRET_KEYS",
    "BenchmarkSpec",
    "DraftModelSpec",
    "EnvironmentSpec",
    "GateSpec",
    "HostSpec",
    "ModelSpec",
    "StackSpec",
    "load_spec",
    "spec_json_schema",
]

CONFIG_NAMESPACE = "sglang-stacks"
"""The Pulumi project name: every config key of a stack is ``sglang-stacks:<key>``."""

SECRET_KEYS = ("sshPrivateKey", "hubToken")
"""Config keys that hold Pulumi secrets; the spec skips them and never sees their values."""

EMULATOR_HOST_FACTS: dict[str, Any] = {
    "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "gpu_count": 8,
    "memory_per_gpu_mib": 97887,
    "compute_capability": "12.0",
    "interconnect": "pcie",
}
"""What the local emulator host reports: the campaign's 8 x RTX PRO 6000 (96 GB, SM120, PCIe)."""

_FACT_FIELDS = tuple(EMULATOR_HOST_FACTS)
# Values reach a remote shell; quoting makes any value safe, and this keeps them readable as well.
_ENV_VALUE = re.compile(r"^[A-Za-z0-9_.,:/=@%+^-]*$")
_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NO_CONTROL = r"^[^\x00-\x1f\x7f]+$"


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class HostSpec(_Section):
    """The GPU host: the local emulator, or a machine reached over SSH, with its declared facts.

    The facts default to the emulator's; an SSH host must declare all of them, and the host
    component compares them with what ``nvidia-smi`` reports before anything launches.
    """

    kind: Literal["emulator", "ssh"] = "emulator"
    """``emulator`` runs the built-in SGLang emulator locally; ``ssh`` reaches a real GPU host."""
    address: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.:_-]+$")
    """SSH host name or IP address (ssh only)."""
    port: int = Field(default=22, ge=1, le=65535)
    """SSH port (ssh only)."""
    user: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    """SSH user (ssh only)."""
    host_key: str | None = Field(
        default=None, pattern=r"^(ssh-[a-z0-9-]+|ecdsa-sha2-nistp[0-9]+|sk-[a-z0-9@.-]+) [A-Za-z0-9+/]+=*$"
    )
    """Pinned public host key, ``<type> <base64>`` as ``ssh-keyscan`` prints it (ssh only)."""
    gpu_model: str = Field(default=EMULATOR_HOST_FACTS["gpu_model"], min_length=1)
    """GPU name as ``nvidia-smi --query-gpu=name`` prints it."""
    gpu_count: int = Field(default=EMULATOR_HOST_FACTS["gpu_count"], ge=1, le=64)
    """Number of GPUs."""
    memory_per_gpu_mib: int = Field(default=EMULATOR_HOST_FACTS["memory_per_gpu_mib"], ge=1024)
    """Memory per GPU in MiB, as ``nvidia-smi --query-gpu=memory.total`` prints it."""
    compute_capability: str = Field(default=EMULATOR_HOST_FACTS["compute_capability"], pattern=r"^\d+\.\d+$")
    """CUDA compute capability, like ``12.0`` (SM120) or ``9.0`` (SM90)."""
    interconnect: Literal["pcie", "nvlink"] = EMULATOR_HOST_FACTS["interconnect"]
    """How the GPUs talk to each other: ``pcie`` only, or ``nvlink``."""
    state_dir: str = Field(default="~/.sglang-stacks", pattern=r"^[A-Za-z0-9_./~-]+$")
    """Folder on the host for sglang-stacks' own files: the GPU claim, server logs."""
    connect_timeout_s: int = Field(default=10, ge=1, le=300)
    """Seconds to wait for the SSH host to answer a connection (ssh only); raise it for slow
    networks."""

    @model_validator(mode="after")
    def _facts_fit_the_kind(self) -> HostSpec:
        if self.kind == "emulator":
            differing = [f for f in _FACT_FIELDS if getattr(self, f) != EMULATOR_HOST_FACTS[f]]
            if differing:
                declared = ", ".join(f"{f}={getattr(self, f)!r}" for f in differing)
                expected = ", ".join(f"{f}={EMULATOR_HOST_FACTS[f]!r}" for f in differing)
                raise ValueError(
                    f"the emulator host has fixed facts, but this stack declares {declared}; "
                    f"declare {expected} or leave them out"
                )
            ssh_only = [f for f in ("address", "user", "host_key") if getattr(self, f) is not None]
            if ssh_only:
                raise ValueError(
                    f"{', '.join(ssh_only)} apply to kind: ssh only; remove them or set kind: ssh"
                )
            return self
        missing = [f for f in ("address", "user", "host_key") if getattr(self, f) is None]
        missing += [f for f in _FACT_FIELDS if f not in self.model_fields_set]
        if missing:
            raise ValueError(
                f"an ssh host must declare {', '.join(missing)}; the facts are checked against nvidia-smi "
                f"and the host key is pinned (get it with `ssh-keyscan -t ed25519 <address>`)"
            )
        return self

    @property
    def needs_ssh_key(self) -> bool:
        """Whether deploying needs the ``sshPrivateKey`` secret."""
        return self.kind == "ssh"

    @property
    def sm_major(self) -> int:
        """The major compute capability: 12 for SM120."""
        return int(self.compute_capability.split(".")[0])


class EmulatorSpec(_Section):
    """The SGLang emulator, when it stands in for SGLang on the host: what it plays and how fast."""

    profile: str = Field(default="rtx-pro-6000-x8-kimi-k2.5-int4", pattern=r"^[A-Za-z0-9_./~-]+$")
    """A shipped hardware profile's name, or the path of a profile JSON file on the host."""
    time_scale: float = Field(default=0.05, gt=0, le=10)
    """Factor on startup durations (weight loading, graph capture): 1.0 takes as long as the real
    server; decode speed is never scaled."""
    faults: dict[str, Any] | None = None
    """Faults to inject (crash, hang, slow readiness, 5xx bursts, port in use); see docs/emulator.md.
    Checked here, before any server (another stack's included) is stopped."""
    state_dir: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_./~-]+$")
    """Where the emulated GPUs record their memory use on the host; default ``~/.sglang-emulator``."""

    @field_validator("faults")
    @classmethod
    def _faults_are_known(cls, faults: dict[str, Any] | None) -> dict[str, Any] | None:
        from sglang_emulator.faults import FaultError, parse_faults

        if faults:
            try:
                parse_faults(faults)
            except FaultError as error:
                raise ValueError(str(error)) from None
        return faults

    def variables(self, release: str) -> dict[str, str]:
        """The emulator's environment variables for its server and its nvidia-smi."""
        env = {
            "SGLANG_EMULATOR_RELEASE": release,
            "SGLANG_EMULATOR_PROFILE": self.profile,
            "SGLANG_EMULATOR_TIME_SCALE": f"{self.time_scale:g}",
        }
        if self.faults:
            env["SGLANG_EMULATOR_FAULTS"] = json.dumps(self.faults, sort_keys=True)
        if self.state_dir:
            env["SGLANG_EMULATOR_STATE_DIR"] = self.state_dir
        return env


class EnvironmentSpec(_Section):
    """The Python environment on the host: the SGLang release, extra pins, and process variables."""

    sglang_release: str = "0.5.8"
    """SGLang version to install; selects the flag table used for rendering and preflight."""
    runtime: Literal["sglang", "emulator"] | None = None
    """``sglang`` installs the real release from PyPI; ``emulator`` installs the project's SGLang
    emulator playing that release. Default: emulator on the emulator host, sglang over SSH."""
    emulator: EmulatorSpec = Field(default_factory=EmulatorSpec)
    """Emulator settings (runtime emulator only)."""
    extra_pins: tuple[str, ...] = ()
    """Further exact pins installed next to SGLang, like ``flashinfer-python==0.2.9``."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for the server process, like ``NCCL_ALGO: Ring``."""

    @field_validator("sglang_release")
    @classmethod
    def _known_release(cls, release: str) -> str:
        if release not in known_releases():
            raise ValueError(
                f"no flag table ships for SGLang {release!r}; the nearest releases with one are "
                f"{' and '.join(nearest_releases(release))}. Pin one of them, or add a table with "
                f"python -m sglang_flags.regenerate {release}"
            )
        return release

    @field_validator("extra_pins")
    @classmethod
    def _exact_pins(cls, pins: tuple[str, ...]) -> tuple[str, ...]:
        bad = [p for p in pins if not _PIN.match(p)]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))} must be exact pins like 'package==1.2.3'")
        return pins

    @field_validator("env")
    @classmethod
    def _safe_env(cls, env: dict[str, str]) -> dict[str, str]:
        bad_names = [n for n in env if not is_env_name(n)]
        if bad_names:
            raise ValueError(
                f"{', '.join(map(repr, bad_names))} are not variable names; use letters, digits and _"
            )
        bad_values = [f"{n}={v!r}" for n, v in env.items() if not _ENV_VALUE.match(v)]
        if bad_values:
            raise ValueError(
                f"{', '.join(bad_values)} contain shell metacharacters or spaces; "
                f"values may use letters, digits and _ . , : / = @ % + ^ -"
            )
        return env


class ModelSpec(_Section):
    """The target model: where it is on the host, and how much memory its weights take per GPU."""

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


class DraftModelSpec(_Section):
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


class BenchmarkSpec(_Section):
    """The post-deploy benchmark workload: fixed lengths, warmup, repeated measurements."""

    input_len: int = Field(default=1024, ge=1)
    """Prompt tokens per request."""
    output_len: int = Field(default=512, ge=1)
    """Generated tokens per request."""
    ignore_eos: bool = True
    """Keep generating past end-of-sequence so every request yields ``output_len`` tokens."""
    concurrency: tuple[int, ...] = Field(default=(1,), min_length=1)
    """Concurrent streams to measure; 1 is the single-stream decode speed the campaign compared."""
    warmup_requests: int = Field(default=2, ge=0)
    """Requests sent and discarded before measuring."""
    repetitions: int = Field(default=5, ge=1)
    """Measured repetitions per concurrency level; the mean and 95 % interval come from these."""
    requests_per_repetition: int = Field(default=4, ge=1)
    """Requests per repetition; at least the highest concurrency."""
    request_timeout_s: float = Field(default=600.0, gt=0)
    """Longest one request may take before it counts as an error."""
    timeout_s: float = Field(default=3600.0, gt=0)
    """Longest the whole benchmark may take on the host."""

    @model_validator(mode="after")
    def _enough_requests(self) -> BenchmarkSpec:
        if any(c < 1 for c in self.concurrency):
            raise ValueError("concurrency levels must be at least 1")
        if len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError(f"concurrency {list(self.concurrency)} repeats a level; list each once")
        if self.requests_per_repetition < max(self.concurrency):
            raise ValueError(
                f"requests_per_repetition={self.requests_per_repetition} cannot keep "
                f"{max(self.concurrency)} streams busy; set it to at least {max(self.concurrency)}"
            )
        return self


class GateSpec(_Section):
    """A regression gate: compare this stack's tok/s with a baseline stack's."""

    baseline_stack: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """Name of the stack whose recorded tok/s is the reference."""
    tolerance_pct: float = Field(default=5.0, ge=0, le=100)
    """How many percent slower than the baseline still passes."""
    on_regression: Literal["fail", "hand_back"] = "fail"
    """``fail`` the update, or ``hand_back`` the host to the baseline stack."""


class LaunchSpec(_Section):
    """How the server is supervised on the host."""

    ready_timeout_s: float = Field(default=1800.0, gt=0)
    """How long model loading and CUDA-graph capture may take before the start counts as failed."""
    stop_timeout_s: float = Field(default=120.0, gt=0)
    """How long a stopping server may take to exit and free its GPU memory."""
    log_dir: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_./~-]+$")
    """Folder on the host for the server logs, one file per launch; default ``<host.state_dir>/logs``."""
    takeover: bool = True
    """Take the host's GPUs from another stack that holds them (its server is stopped first);
    false makes the update stop with an error instead."""


class StackSpec(BaseModel):
    """Everything one stack declares, one section per config key."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, populate_by_name=True
    )

    host: HostSpec = Field(default_factory=HostSpec)
    """``sglang-stacks:host``: the GPU host and its facts."""
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    """``sglang-stacks:environment``: SGLang release, pins and environment variables."""
    model: ModelSpec
    """``sglang-stacks:model``: the target model."""
    draft_model: DraftModelSpec | None = Field(default=None, alias="draftModel")
    """``sglang-stacks:draftModel``: the speculative-decoding draft model, when there is one."""
    server: ServerFlags
    """``sglang-stacks:server``: SGLang launch flags."""
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec)
    """``sglang-stacks:benchmark``: the post-deploy workload."""
    gate: GateSpec | None = None
    """``sglang-stacks:gate``: the regression gate, when there is one."""
    launch: LaunchSpec = Field(default_factory=LaunchSpec)
    """``sglang-stacks:launch``: supervision of the server process."""

    @model_validator(mode="after")
    def _paths_agree(self) -> StackSpec:
        if self.server.model_path is not None and self.server.model_path != self.model.path:
            raise ValueError(
                f"server.model_path {self.server.model_path!r} differs from model.path "
                f"{self.model.path!r}; remove server.model_path (it defaults to model.path)"
            )
        draft_path = self.server.speculative_draft_model_path
        if (
            draft_path is not None
            and self.draft_model is not None
            and draft_path != self.draft_model.path_on_host
        ):
            raise ValueError(
                f"server.speculative_draft_model_path {draft_path!r} differs from "
                f"draftModel.path_on_host {self.draft_model.path_on_host!r}; remove the server flag "
                f"(it defaults to draftModel.path_on_host)"
            )
        return self

    @property
    def runtime(self) -> Literal["sglang", "emulator"]:
        """What runs as SGLang on the host: the real release, or the emulator playing it."""
        if self.environment.runtime is not None:
            return self.environment.runtime
        return "emulator" if self.host.kind == "emulator" else "sglang"

    @property
    def tp_size(self) -> int:
        """The tensor-parallel size the server runs with (SGLang's default is 1)."""
        return self.server.tp_size or 1

    def launch_flags(self) -> ServerFlags:
        """The server flags with the model path, and under speculative decoding the draft path,
        filled from their sections."""
        fill: dict[str, Any] = {}
        if self.server.model_path is None:
            fill["model_path"] = self.model.path
        speculating = self.server.speculative_algorithm is not None
        if speculating and self.server.speculative_draft_model_path is None and self.draft_model is not None:
            fill["speculative_draft_model_path"] = self.draft_model.path_on_host
        return self.server.model_copy(update=fill)


SECTION_KEYS: tuple[str, ...] = tuple(field.alias or name for name, field in StackSpec.model_fields.items())
"""The stack config keys that hold the spec's sections (``host``, ``draftModel``, ...)."""


@cache
def _schema() -> dict[str, Any]:
    return StackSpec.model_json_schema(by_alias=True)


def spec_json_schema() -> dict[str, Any]:
    """The JSON Schema of a stack's sections (keys without the ``sglang-stacks:`` prefix)."""
    schema = dict(_schema())
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "sglang-stacks stack config"
    return schema


def _key_path(parts: list[Any] | tuple[Any, ...]) -> str:
    if not parts:
        return CONFIG_NAMESPACE
    head, *rest = parts
    path = f"{CONFIG_NAMESPACE}:{head}"
    for part in rest:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _properties_at(schema: dict[str, Any], node: dict[str, Any]) -> list[str]:
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return list(node.get("properties", {}))


def _schema_problem(error: jsonschema.ValidationError, schema: dict[str, Any]) -> str:
    parts = list(error.absolute_path)
    path = _key_path(parts)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = _properties_at(schema, error.schema if isinstance(error.schema, dict) else {})
        lines = []
        for key in sorted(set(error.instance) - set(allowed)):
            near = difflib.get_close_matches(key, allowed, n=2)
            fix = f"did you mean {' or '.join(near)}?" if near else f"allowed keys: {', '.join(allowed)}."
            lines.append(f"{_key_path([*parts, key])}: unknown key. Remove it or rename it: {fix}")
        return "\n".join(lines)
    if error.validator == "required":
        return f"{path}: {error.message}. Add it."
    if error.validator == "anyOf" and error.context:
        # "X or null" and unions: all type mismatches list the types; otherwise report the
        # complaint of the alternative that matched the type.
        if all(e.validator == "type" for e in error.context):
            types = " or ".join(str(e.validator_value) for e in error.context if e.validator_value != "null")
            return _not_allowed(path, error.instance, types)
        return _schema_problem(next(e for e in error.context if e.validator != "type"), schema)
    return _not_allowed(path, error.instance, _expected(error))


def _not_allowed(path: str, value: object, expected: str) -> str:
    return f"{path}: {value!r} is not allowed; expected {expected}. Change the value in the stack file."


def _expected(error: jsonschema.ValidationError) -> str:
    limit: Any = error.validator_value
    match error.validator:
        case "type":
            return f"a value of type {limit}"
        case "enum":
            return f"one of {', '.join(str(v) for v in limit)}"
        case "minimum":
            return f"at least {limit}"
        case "maximum":
            return f"at most {limit}"
        case "exclusiveMinimum":
            return f"more than {limit}"
        case "exclusiveMaximum":
            return f"less than {limit}"
        case "pattern":
            return f"text matching {limit}"
        case "minLength":
            return f"at least {limit} characters"
        case "minItems":
            return f"at least {limit} items"
    return error.message


def _pydantic_problem(error: Any) -> str:
    parts = [p for p in error["loc"] if p != "__root__"]
    path = _key_path(parts)
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    shown = "" if isinstance(value, dict) else f" (value {value!r})"
    return f"{path}{shown}: {message}."


def load_spec(sections: Mapping[str, Any], stack: str) -> StackSpec:
    """Validate a stack's config sections and return its spec.

    ``sections`` maps config keys (with or without ``sglang-stacks:``) to their values; secret
    keys are skipped. Raises SpecError listing every problem with its key path, the value, what
    is allowed and the fix.
    """
    plain: dict[str, Any] = {}
    for key, value in sections.items():
        name = key.removeprefix(f"{CONFIG_NAMESPACE}:")
        if name not in SECRET_KEYS:
            plain[name] = value
    schema = spec_json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    problems = [_schema_problem(e, schema) for e in sorted(validator.iter_errors(plain), key=str)]
    if not problems:
        try:
            return StackSpec.model_validate(plain)
        except ValidationError as error:
            problems = [_pydantic_problem(e) for e in error.errors()]
    listed = "\n".join(f"  - {p}" for p in problems)
    raise SpecError(f"Stack {stack!r} has {len(problems)} config problem(s):\n{listed}")
