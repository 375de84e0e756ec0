"""Injected faults, from the profile's ``faults`` object and ``$SGLANG_EMULATOR_FAULTS`` (JSON).

The environment's keys override the profile's. Keys:

- ``crash_after_s``: once ready, crash (SGLang's child-failure exit) after this many seconds; at
  0, as it logs that it is ready, before any health check answers 200;
- ``crash_at_request``: crash the same way when the Nth generation request arrives, before it is
  answered (the requests of a load generator's warmup count);
- ``crash_after_requests``: crash when this many generation requests have finished;
- ``hang_after_requests``: when this many generation requests have finished, the scheduler stops
  making progress for good (as one stuck in a collective that never returns): the process stays
  alive and its port accepts connections, but no generation finishes again, in flight or new,
  and ``/health`` waits SGLang's ``SGLANG_HEALTH_CHECK_TIMEOUT`` seconds (20) before its 503;
- ``hang_at_phase``: stop making progress forever at a startup phase (``init``, ``weights``,
  ``kv_cache``, ``cuda_graph``, ``warmup``); the process stays alive and silent;
- ``slow_readiness_s``: extra seconds between "Uvicorn running" and ready (``/health`` 503);
- ``error_burst``: ``{"after_requests": N, "count": M, "status": 500}``: requests N+1..N+M fail;
- ``port_in_use``: fail to bind the HTTP port the way uvicorn does, even when it is free;
- ``gpu_memory_held_mib``: another process holds this much of each of the server's GPUs when it
  starts (as one started beside it would), so SGLang finds less free than a plan counts; nvidia-smi
  does not list it (`sglang_emulator.hold` is a holder it lists, for the check before a launch).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["FAULT_NAMES", "HANG_PHASES", "FaultError", "Faults", "load_faults", "parse_faults"]

FAULT_NAMES = (
    "crash_after_s",
    "crash_at_request",
    "crash_after_requests",
    "hang_after_requests",
    "hang_at_phase",
    "slow_readiness_s",
    "error_burst",
    "port_in_use",
    "gpu_memory_held_mib",
)
"""Every fault a server can be given (the keys of ``faults``), each described above."""
HANG_PHASES = ("init", "weights", "kv_cache", "cuda_graph", "warmup")


class FaultError(ValueError):
    """The fault specification names an unknown key or holds a value of the wrong kind."""


@dataclass(frozen=True)
class Faults:
    """The faults one emulated server will inject."""

    crash_after_s: float | None = None
    crash_at_request: int | None = None
    crash_after_requests: int | None = None
    hang_after_requests: int | None = None
    hang_at_phase: str | None = None
    slow_readiness_s: float = 0.0
    error_burst_after_requests: int = 0
    error_burst_count: int = 0
    error_burst_status: int = 500
    port_in_use: bool = False
    gpu_memory_held_mib: int = 0

    def is_error_burst(self, request_number: int) -> bool:
        """Whether the ``request_number``-th request (1-based) falls inside the burst."""
        first = self.error_burst_after_requests + 1
        return first <= request_number < first + self.error_burst_count


def _number(spec: dict[str, Any], key: str, kind: type, minimum: float) -> Any:
    value = spec.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and int(value) != value)
    ):
        raise FaultError(
            f"Fault {key!r} must be a {kind.__name__} >= {minimum}, got {value!r}. Fix the fault spec."
        )
    if value < minimum:
        raise FaultError(f"Fault {key!r} must be >= {minimum}, got {value!r}. Fix the fault spec.")
    return kind(value)


def load_faults(profile_faults: dict[str, Any]) -> Faults:
    """Merge the profile's faults with ``$SGLANG_EMULATOR_FAULTS`` and check every key."""
    spec = dict(profile_faults)
    raw_env = os.environ.get("SGLANG_EMULATOR_FAULTS", "").strip()
    if raw_env:
        try:
            env = json.loads(raw_env)
        except json.JSONDecodeError as exc:
            raise FaultError(
                f"SGLANG_EMULATOR_FAULTS is not valid JSON ({exc}). Set it to an object such as "
                "'{\"crash_after_requests\": 3}'."
            ) from exc
        if not isinstance(env, dict):
            raise FaultError(f"SGLANG_EMULATOR_FAULTS must be a JSON object, got {raw_env!r}.")
        spec.update(env)
    return parse_faults(spec)


def parse_faults(spec: dict[str, Any]) -> Faults:
    """Checks a fault specification (a stack file's ``emulator.faults``) and returns its faults."""
    if not isinstance(spec, dict):
        raise FaultError(f"Faults must be an object of fault names and values, got {spec!r}.")
    unknown = sorted(set(spec) - set(FAULT_NAMES))
    if unknown:
        raise FaultError(
            f"Unknown fault {unknown[0]!r}; allowed: {', '.join(sorted(FAULT_NAMES))}. Remove or rename it."
        )
    hang = spec.get("hang_at_phase")
    if hang is not None and hang not in HANG_PHASES:
        raise FaultError(
            f"Fault 'hang_at_phase' is {hang!r}; allowed: {', '.join(HANG_PHASES)}. Pick one of them."
        )
    burst = spec.get("error_burst") or {}
    if not isinstance(burst, dict) or set(burst) - {"after_requests", "count", "status"}:
        raise FaultError(
            f"Fault 'error_burst' must be an object with after_requests, count and status; got {burst!r}."
        )
    status = _number(burst, "status", int, 500) or 500
    if status > 599:
        raise FaultError(f"Fault 'error_burst.status' must be a 5xx code, got {status}. Use 500..599.")
    port_in_use = spec.get("port_in_use", False)
    if not isinstance(port_in_use, bool):
        raise FaultError(f"Fault 'port_in_use' must be true or false, got {port_in_use!r}.")
    return Faults(
        crash_after_s=_number(spec, "crash_after_s", float, 0),
        crash_at_request=_number(spec, "crash_at_request", int, 1),
        crash_after_requests=_number(spec, "crash_after_requests", int, 1),
        hang_after_requests=_number(spec, "hang_after_requests", int, 1),
        hang_at_phase=hang,
        slow_readiness_s=_number(spec, "slow_readiness_s", float, 0) or 0.0,
        error_burst_after_requests=_number(burst, "after_requests", int, 0) or 0,
        error_burst_count=_number(burst, "count", int, 0) or 0,
        error_burst_status=status,
        port_in_use=port_in_use,
        gpu_memory_held_mib=_number(spec, "gpu_memory_held_mib", int, 0) or 0,
    )
