"""Whether each SSH host of a campaign's pool is the host it declares, asked before the sweep makes
anything: its GPUs as `nvidia-smi` reports them, compared with the declared facts (the check every
trial's host probe makes, once, at load). A host that differs would fail every trial handed to it.

A host whose trials run real SGLang is probed over SSH with the key its trials get; one whose
trials run the emulator answers from the emulator's profile, the same on every machine, so its
stand-in is asked here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sglang_stacks.campaign.axes import bind_host
from sglang_stacks.campaign.axis_keys import refuse_listed
from sglang_stacks.campaign.keys import SSH_KEY
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.campaign.plan import Plan
from sglang_stacks.config.spec import StackSpec, load_spec
from sglang_stacks.drive import automation
from sglang_stacks.errors import HostError, SpecError
from sglang_stacks.hostops import probe
from sglang_stacks.hostops.connection import Connection

__all__ = ["check_pool_facts"]

_HOST_KEY = re.compile(r"\bhost\.(?=\w)")
"""A key of the host section in a probe's sentence, to be named as the pool host's."""


def _runtimes(plan: Plan, pool_host: PoolHost) -> dict[tuple[int, str], StackSpec]:
    """For each host of ``pool_host`` (by index), one trial spec there per runtime its trials may
    run (the axes may set it)."""
    sections = [row.candidate.sections for row in plan.kept()] if plan.listed else [plan.base]
    specs: dict[tuple[int, str], StackSpec] = {}
    for candidate in sections or [plan.base]:
        spec = load_spec(bind_host(candidate, pool_host), plan.campaign.base)
        hosts = [spec.for_host(i) for i in range(len(spec.fleet.hosts))] if spec.fleet else [spec]
        for index, host in enumerate(hosts):
            specs.setdefault((index, host.runtime), host)
    return specs


def _probed(spec: StackSpec, pool_host: PoolHost, plan: Plan, project: Path) -> probe.HostFacts:
    if spec.runtime == "emulator":
        variables = spec.environment.emulator.variables(spec.environment.sglang_release)
        return probe.probe(Connection.local(), nvidia_smi=probe.stand_in(variables, sys.executable))
    source = pool_host.key_stack(plan.campaign.base)
    assert source is not None  # an ssh host's key stack (check_pool_keys ran first)
    key = automation.select_stack(project, source).get_config(SSH_KEY).value
    return probe.probe(Connection.for_host(spec.host, private_key=key))


def check_pool_facts(plan: Plan, project: Path) -> None:
    """SpecError naming every SSH pool host whose GPUs differ from its declared facts, or that
    cannot be probed, with the fix; nothing is created."""
    problems = []
    for index, pool_host in enumerate(plan.campaign.pool):
        where = f"pool.{index} ({pool_host.name})"
        for (machine, runtime), spec in _runtimes(plan, pool_host).items():
            if spec.host.kind != "ssh":
                continue  # the emulator host's facts are fixed; a cluster's nodes are read by preview
            on = f", host {machine}" if pool_host.fleet is not None else ""
            said = f"{where}{on}, trials on {'the emulator' if runtime == 'emulator' else 'SGLang'}"
            try:
                found = _probed(spec, pool_host, plan, project)
            except (HostError, SpecError) as error:
                problems.append(f"{said}: {error}")
                continue
            key = f"pool.{index}.fleet.hosts.{machine}." if pool_host.fleet else f"pool.{index}.host."
            for problem in probe.compare_facts(spec.host, found):
                problems.append(f"{said}: {_HOST_KEY.sub(key, problem)}")
    refuse_listed(
        problems,
        f"{len(problems)} problem(s) with the GPUs of campaign {plan.name}'s pool",
        "Fix the pool in the campaign file, or remove the host; nothing was created.",
    )
