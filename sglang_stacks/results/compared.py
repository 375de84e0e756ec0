"""What ``compare`` reads of one stack's outputs: the flags as a person reads them, the release and
the first benchmark level, from a stack on one host or a fleet behind the router (aggregated, or
disaggregated: the flags both roles share by name, the others per role)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sglang_stacks.config.flags import FlagValue
from sglang_stacks.config.render import shown_flags
from sglang_stacks.errors import SpecError
from sglang_stacks.results.outputs import DeploymentOutputs, FleetOutputs
from sglang_stacks.results.stats import BenchmarkResult

__all__ = ["Compared", "read_compared"]


@dataclass(frozen=True)
class Compared:
    """One stack as compare puts it beside the others."""

    flags: dict[str, FlagValue]
    """Each launch flag as its release spells it; a disaggregated fleet's role-specific ones as
    ``prefill --flag`` and ``decode --flag``; a fleet's ``workers`` (how many, in which roles)."""
    sglang_version: str
    benchmark: BenchmarkResult
    """The first load level (through the router, for a fleet)."""


def _redeploy(stack: str, what: str) -> SpecError:
    return SpecError(
        f"Stack {stack!r} {what}. Run `pulumi up -s {stack}` so the stack is deployed and benchmarked, "
        "then compare again."
    )


def _fleet(stack: str, fleet: FleetOutputs) -> Compared:
    if fleet.sglang_version is None or not fleet.benchmark_levels:
        raise _redeploy(stack, "was deployed by an earlier version that did not record its release")
    release = fleet.sglang_version
    if fleet.role_flags is None:
        shown = {"workers": f"{len(fleet.replicas)} aggregated", **shown_flags(fleet.launch_flags, release)}
        return Compared(shown, release, fleet.benchmark_levels[0])
    roles = {role: shown_flags(flags, release) for role, flags in fleet.role_flags.items()}
    names = dict.fromkeys(name for shown in roles.values() for name in shown)
    counts = {role: sum(r.role == role for r in fleet.replicas) for role in ("prefill", "decode")}
    flags: dict[str, FlagValue] = {"workers": f"{counts['prefill']} prefill + {counts['decode']} decode"}
    for name in names:
        values = {role: shown.get(name) for role, shown in roles.items()}
        if len({repr(v) for v in values.values()}) == 1 and None not in values.values():
            flags[name] = next(iter(values.values()))  # type: ignore[assignment]
        else:
            flags.update({f"{role} {name}": v for role, v in values.items() if v is not None})
    return Compared(flags, release, fleet.benchmark_levels[0])


def read_compared(stack: str, outputs: Mapping[str, Any]) -> Compared:
    """``outputs`` of ``stack`` read into their typed model; SpecError naming the stack and the fix
    when they are missing or unusable."""
    if not outputs:
        raise SpecError(
            f"Stack {stack!r} has no outputs: it was never deployed, or it was destroyed. Run "
            f"`pulumi up -s {stack}` so it is deployed and benchmarked, then compare again."
        )
    try:
        if "router_url" in outputs:  # only a fleet has a router
            return _fleet(stack, FleetOutputs.model_validate(outputs))
        host = DeploymentOutputs.model_validate(outputs)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        what = f"output {key!r} is not usable" if key else "outputs are not usable"
        raise _redeploy(stack, f"{what}: {str(first['msg']).removeprefix('Value error, ')}") from exc
    return Compared(shown_flags(host.launch_flags, host.sglang_version), host.sglang_version, host.benchmark)
