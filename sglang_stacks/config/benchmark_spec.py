"""The stack spec's benchmark and gate sections: the workload measured after every new server,
its service-level objectives, and the regression gate against a baseline stack."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from functools import cache
from typing import Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from sglang_loadgen.settings import WorkloadSettings, workload_problem
from sglang_stacks.config.docstrings import FileSection


class SloSpec(FileSection):
    """Per-request limits (service-level objectives): requests within all of them count as goodput."""

    ttft_ms: float | None = Field(default=None, gt=0)
    """Longest time to first token, in milliseconds."""
    tpot_ms: float | None = Field(default=None, gt=0)
    """Longest mean time per output token after the first, in milliseconds."""
    e2e_ms: float | None = Field(default=None, gt=0)
    """Longest end-to-end latency of a request, in milliseconds."""

    @model_validator(mode="after")
    def _some_limit(self) -> SloSpec:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError(
                "an slo needs at least one of ttft_ms, tpot_ms and e2e_ms; set one or remove slo"
            )
        return self


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class BenchmarkSpec(WorkloadSettings):
    """The post-deploy benchmark: the prompts, the load shape, warmup and repetitions (the load
    generator's own settings, declared once beside it), the whole run's limit and its service-level
    objectives."""

    timeout_s: float = field(
        default=3600.0, metadata={"description": "Longest the whole benchmark may take on the host.", "gt": 0}
    )
    slo: SloSpec | None = field(
        default=None,
        metadata={"description": "Limits per request; with them the stack reports goodput (output goodput)."},
    )

    @model_validator(mode="after")
    def _a_workload(self) -> BenchmarkSpec:
        problem = workload_problem(self)
        if problem:
            raise ValueError(problem.removesuffix("."))
        return self

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> BenchmarkSpec:
        """The spec of a stack file's benchmark section (ValidationError naming the key)."""
        return _adapter().validate_python(section)

    def settings(self, **options: Any) -> dict[str, Any]:
        """The section as JSON values, as a stack file holds it (``options`` as pydantic's
        ``dump_python`` takes them)."""
        dumped: dict[str, Any] = _adapter().dump_python(self, mode="json", **options)
        return dumped


@cache
def _adapter() -> TypeAdapter[BenchmarkSpec]:
    return TypeAdapter(BenchmarkSpec)


class GateSpec(FileSection):
    """A regression gate: compare this stack's tok/s with a baseline stack's."""

    baseline_stack: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """Name of the stack whose recorded tok/s is the reference."""
    tolerance_pct: float = Field(default=5.0, ge=0, le=100)
    """How many percent slower than the baseline still passes."""
    on_regression: Literal["fail", "hand_back"] = "fail"
    """``fail`` the update, or ``hand_back`` the host to the baseline stack."""
    launch_cv_pct: float | None = Field(default=None, ge=0, le=50)
    """How much a configuration's tok/s moves from one launch or host to another (coefficient of
    variation, percent): the baseline's result is another launch's, so the comparison allows for
    it, and a slowdown within that noise passes. Default: the project's measured floor."""
