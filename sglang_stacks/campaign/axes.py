"""Expanding a campaign's axes into candidates, and a candidate into a stack's sections.

A candidate is one point of every axis. Its identity is a digest of the sections it gives the
stack, without the host (which the pool decides), so the same configuration keeps its name
(``<campaign>-<digest>``) whichever host runs it and however often the sweep resumes.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.campaign.model_pool import PoolHost

__all__ = [
    "Candidate",
    "apply",
    "bind_host",
    "candidate_base",
    "combine",
    "expand",
    "trial_stack_name",
]

_UNSET = (None, "auto")
DIGEST_CHARS = 8


@dataclass(frozen=True)
class Candidate:
    """One combination of axis points: its labels per axis and the stack sections it makes."""

    labels: dict[str, str]
    """Axis title -> the point's label (``server.cuda_graph_max_bs`` -> ``128``)."""
    assignments: dict[str, Any]
    """Every key the axes set, to its value (``auto``/None: unset)."""
    sections: dict[str, Any]
    """The base stack's sections with the assignments applied and the campaign's workload."""
    digest: str
    """Short digest of ``sections``: the candidate's identity."""


def apply(base: Mapping[str, Any], assignments: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (stack sections) with each ``section.field`` key set, or removed for auto/None. A key
    under one that another assignment removes is left out: with ``fleet.disaggregation`` unset
    (aggregated serving), ``fleet.disaggregation.decode.server.tp_size`` has nothing to set."""
    sections = copy.deepcopy(dict(base))
    removed = [key for key, value in assignments.items() if value in _UNSET and not isinstance(value, bool)]
    for key, value in assignments.items():
        if any(key.startswith(parent + ".") for parent in removed):
            continue
        *parents, leaf = key.split(".")
        node = sections
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        if value in _UNSET and not isinstance(value, bool):
            node.pop(leaf, None)
        else:
            node[leaf] = copy.deepcopy(value)
    return sections


def _digest(sections: Mapping[str, Any]) -> str:
    text = json.dumps(sections, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def candidate_base(campaign: CampaignSpec, base: Mapping[str, Any]) -> dict[str, Any]:
    """The sections every candidate starts from: the base stack's without its host and gate (the
    pool decides the host), with the campaign's workload as the benchmark."""
    sections = {k: copy.deepcopy(v) for k, v in base.items() if k not in ("host", "gate")}
    if campaign.workload is not None:
        written = campaign.workload_keys
        sections["benchmark"] = {k: v for k, v in campaign.workload.settings().items() if k in written}
    return sections


def combine(base: Mapping[str, Any], points: Mapping[str, tuple[str, Mapping[str, Any]]]) -> Candidate:
    """The candidate of one point per axis (axis title -> (label, assignments)) on ``base``
    (``candidate_base``)."""
    labels = {title: label for title, (label, _) in points.items()}
    assignments = {k: v for _, point in points.values() for k, v in point.items()}
    sections = apply(base, assignments)
    return Candidate(labels, assignments, sections, _digest(sections))


def expand(campaign: CampaignSpec, base: Mapping[str, Any]) -> list[Candidate]:
    """Every combination of the axes' points, in file order (the first axis varies slowest)."""
    start = candidate_base(campaign, base)
    candidates: list[Candidate] = []
    seen: set[str] = set()
    for combination in itertools.product(*(axis.points() for axis in campaign.axes)):
        candidate = combine(
            start, {axis.title: point for axis, point in zip(campaign.axes, combination, strict=True)}
        )
        if candidate.digest in seen:
            continue  # two combinations that make the same stack run once
        seen.add(candidate.digest)
        candidates.append(candidate)
    return candidates


def trial_stack_name(campaign_name: str, candidate: Candidate) -> str:
    """The trial's stack: ``<campaign>-<digest>``."""
    return f"{campaign_name}-{candidate.digest}"


def bind_host(sections: Mapping[str, Any], pool_host: PoolHost) -> dict[str, Any]:
    """A candidate's sections deployed to ``pool_host``: its host section, port and emulator state;
    for a pool fleet, the fleet's hosts and its router's ports and folder."""
    bound = copy.deepcopy(dict(sections))
    if pool_host.fleet is not None:
        fleet = bound.setdefault("fleet", {})
        fleet["hosts"] = [
            host.model_dump(mode="json", exclude_unset=True) | {"kind": host.kind}
            for host in pool_host.fleet.hosts
        ]
        fleet["router"] = {**fleet.get("router", {}), **pool_host.fleet.router.model_dump(mode="json")}
        fleet.pop("replicas", None)  # the pool's hosts, one server each
        # A trial's fleet is created once, measured through its router and destroyed, never rolled:
        # every server starts at once, with no benchmark of its own and no canary to judge.
        fleet["rollout"] = {
            **fleet.get("rollout", {}),
            "canary": False,
            "batch_size": len(pool_host.fleet.hosts),
        }
        fleet["benchmark_replicas"] = False
        return bound
    assert pool_host.host is not None  # a pool entry has a host or a fleet
    bound["host"] = pool_host.host.model_dump(mode="json", exclude_unset=True) | {"kind": pool_host.host.kind}
    bound.setdefault("server", {})["port"] = pool_host.port
    if pool_host.emulator_state_dir is not None:
        environment = bound.setdefault("environment", {})
        environment.setdefault("emulator", {})["state_dir"] = pool_host.emulator_state_dir
    return bound
