"""The stack spec: one typed, frozen model of a stack's config, read once and validated at the boundary.

A stack file holds one config key per section (``sglang-stacks:host``, ``sglang-stacks:server``, ...);
inside a section every key is snake_case, and server flags carry SGLang's own names. Secrets
(``sshPrivateKey``, ``hubToken``) are Pulumi secrets and never part of the spec. The sections
themselves are declared in ``sections``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from sglang_stacks.config import multinode
from sglang_stacks.config.benchmark_spec import BenchmarkSpec, GateSpec, SloSpec
from sglang_stacks.config.config_values import typed_as_schema
from sglang_stacks.config.disaggregation import declared_role_flags
from sglang_stacks.config.docstrings import describe_fields
from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.config.fleet import FleetSpec
from sglang_stacks.config.placement import fleet_placement_problem
from sglang_stacks.config.problems import pydantic_problem, schema_problem
from sglang_stacks.config.sections import (
    CONFIG_NAMESPACE,
    EMULATOR_HOST_FACTS,
    SECRET_KEYS,
    DraftModelSpec,
    EnvironmentSpec,
    HostSpec,
    LaunchSpec,
    ModelSpec,
)
from sglang_stacks.errors import SpecError
from sglang_stacks.shape import Shape

__all__ = [
    "CONFIG_NAMESPACE",
    "EMULATOR_HOST_FACTS",
    "SECRET_KEYS",
    "BenchmarkSpec",
    "DraftModelSpec",
    "EnvironmentSpec",
    "FleetSpec",
    "GateSpec",
    "HostSpec",
    "LaunchSpec",
    "ModelSpec",
    "SloSpec",
    "StackSpec",
    "load_spec",
    "spec_json_schema",
]


class StackSpec(Shape):
    """Everything one stack declares, one section per config key."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_extra=describe_fields, populate_by_name=True
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
    fleet: FleetSpec | None = None
    """``sglang-stacks:fleet``: several hosts, one replica each, behind SGLang's router; replaces
    ``sglang-stacks:host``, except on a Kubernetes cluster, whose pods are the replicas."""

    @model_validator(mode="after")
    def _one_place(self) -> StackSpec:
        placement = fleet_placement_problem(self.fleet, self.host, "host" in self.model_fields_set)
        if placement:
            raise ValueError(placement)
        if self.fleet is not None and self.gate is not None:
            raise ValueError(
                "a fleet is gated by fleet.rollout (its canary against the current replicas); remove "
                "sglang-stacks:gate"
            )
        declared = {name: getattr(self.server, name) for name in multinode.NODE_FLAGS}
        found = multinode.problems(self.fleet, self.tp_size, declared)
        roles = self.fleet.role_problems(self.server) if self.fleet else []
        found += declared_role_flags(self.server) or roles
        if found:
            raise ValueError("; ".join(found))
        return self

    def for_host(self, index: int) -> StackSpec:
        """The spec of fleet host ``index`` as a single-host stack: its host section, its server port,
        on the emulator its own GPU state (hosts may share one machine), and in a multi-node server
        its node flags and the interface variables."""
        assert self.fleet is not None  # only fleets have hosts by index
        entry = self.fleet.hosts[index]
        fleet_only = set(type(entry).model_fields) - set(HostSpec.model_fields)
        host = HostSpec.model_validate(entry.model_dump(exclude=fleet_only, exclude_unset=True))
        server = self.fleet.host_flags(index, self.server)
        place = multinode.node_place(self.fleet, index)
        if place is not None:
            server = server.model_copy(update=place.flags())
        emulator = self.environment.emulator.model_copy(
            update={"state_dir": f"{host.state_dir.rstrip('/')}/gpus"}
        )
        env = {**multinode.socket_env(self.fleet), **self.environment.env}
        environment = self.environment.model_copy(update={"emulator": emulator, "env": env})
        update = {"host": host, "server": server, "environment": environment, "fleet": None}
        return self.model_copy(update=update)

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

    @property
    def serving_gpus(self) -> int:
        """The GPUs the stack's servers use, what tok/s per GPU divides by: the server's tensor-parallel
        size, or a fleet's over its servers (each host's, a disaggregated fleet's per role)."""
        if self.fleet is None or not self.fleet.hosts:
            return self.tp_size * (self.fleet.replica_count if self.fleet else 1)
        return sum(
            self.for_host(self.fleet.replica_hosts(r)[0]).tp_size for r in range(self.fleet.replica_count)
        )

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
    try:
        # Strict JSON validation accepts only what the JSON Schema accepts too (no "8" for 8), so a
        # config it passes needs no schema check; the schema validator (0.1-0.3 s to import and
        # build, on every program run) is built only to describe a config with a problem.
        return StackSpec.model_validate_json(json.dumps(plain), strict=True)
    except (ValidationError, TypeError, ValueError):
        # `pulumi config set --path` stores "0.85" for 0.85: read such strings as the schema's type.
        plain = typed_as_schema(plain, _schema(), _schema())
    problems = _schema_problems(plain)
    if not problems:
        try:
            return StackSpec.model_validate(plain)
        except ValidationError as error:
            problems = [pydantic_problem(e) for e in error.errors()]
    listed = "\n".join(f"  - {p}" for p in problems)
    raise SpecError(f"Stack {stack!r} has {len(problems)} config problem(s):\n{listed}")


def _schema_problems(plain: Mapping[str, Any]) -> list[str]:
    """Every problem the JSON Schema finds in a config, each naming its key and the fix."""
    import jsonschema

    schema = spec_json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    return [schema_problem(e, schema) for e in sorted(validator.iter_errors(plain), key=str)]
