"""The stack spec's sections: one frozen model per config key (host, environment, launch; the model
and draft model live in ``model_sections``, server flags in ``flags``, benchmark and gate in
``benchmark_spec``), each key checked where it is declared.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sglang_flags import known_releases, nearest_releases
from sglang_stacks.config.docstrings import FileSection
from sglang_stacks.config.kube import ClusterSpec, host_problems
from sglang_stacks.config.model_sections import DraftModelSpec, KvCacheSpec, ModelSpec
from sglang_stacks.config.names import is_env_name

__all__ = [
    "CONFIG_NAMESPACE",
    "EMULATOR_HOST_FACTS",
    "SECRET_KEYS",
    "DraftModelSpec",
    "EmulatorSpec",
    "EnvironmentSpec",
    "HostSpec",
    "KvCacheSpec",
    "LaunchSpec",
    "ModelSpec",
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


class HostSpec(FileSection):
    """The GPU host: the local emulator, a machine reached over SSH with its declared facts, or a
    Kubernetes cluster whose nodes say their facts.

    The facts default to the emulator's; an SSH host must declare all of them, and the host
    component compares them with what ``nvidia-smi`` reports before anything launches.
    """

    kind: Literal["emulator", "ssh", "kubernetes"] = "emulator"
    """``emulator`` runs the built-in SGLang emulator locally; ``ssh`` reaches a real GPU host;
    ``kubernetes`` runs the server as pods of the cluster named by ``cluster``."""
    cluster: ClusterSpec | None = None
    """The Kubernetes cluster (kubernetes only)."""
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
    gpu_hour_price: float | None = Field(default=None, gt=0)
    """What one GPU of this host costs per hour (any currency); adds the benchmark's cost per
    million output tokens."""

    @model_validator(mode="after")
    def _facts_fit_the_kind(self) -> HostSpec:
        ssh = [name for name in ("address", "user", "host_key") if getattr(self, name) is not None]
        facts = [name for name in _FACT_FIELDS[:4] if name in self.model_fields_set]
        found = host_problems(self.kind, self.cluster, ssh, facts)
        if found:
            raise ValueError("; ".join(found))
        if self.kind == "kubernetes":
            return self  # its facts are the nodes' (sglang_stacks.kube.facts)
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


class EmulatorSpec(FileSection):
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


class EnvironmentSpec(FileSection):
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


class LaunchSpec(FileSection):
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
