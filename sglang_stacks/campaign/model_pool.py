"""Where a campaign runs and keeps its state (``pool`` and ``storage`` in its file): the pool's
hosts, checked to be like hosts in distinct places, and a study URL that holds no password.

A pool entry is one host (a trial is a server on it) or, for a base stack with a fleet, a fleet of
hosts with a router port of its own (a trial is a fleet on all of them: the same GPUs for every
candidate, whether it serves them aggregated or as prefill and decode workers).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import Field, model_validator

from sglang_stacks.campaign.model_axes import NAME_PATTERN
from sglang_stacks.config.docstrings import FileSection
from sglang_stacks.config.fleet import FleetHostSpec
from sglang_stacks.config.spec import HostSpec

__all__ = ["PoolFleet", "PoolHost", "PoolRouter", "check_pool", "check_storage", "describe_pool"]


class PoolRouter(FileSection):
    """Where a pool fleet's router runs on the driver's machine: its own ports and folder (fleets of
    one pool run trials side by side)."""

    port: int = Field(ge=1, le=65535)
    """The router's HTTP port (``fleet.router.port`` of the trials)."""
    metrics_port: int = Field(ge=1, le=65535)
    """The router's Prometheus port (``fleet.router.metrics_port``)."""
    state_dir: str = Field(pattern=r"^[A-Za-z0-9_./~-]+$")
    """The router's log and pid folder (``fleet.router.state_dir``)."""


class PoolFleet(FileSection):
    """A pool entry's hosts, when the base stack is a fleet: every trial runs on all of them."""

    hosts: list[FleetHostSpec] = Field(min_length=2)
    """The fleet's hosts as ``fleet.hosts`` lists them, without a ``role``: a candidate's
    ``fleet.disaggregation`` workers counts give the roles. A host that may serve as a prefill
    worker on a machine shared with another needs its own ``bootstrap_port``."""
    router: PoolRouter
    """The router of this fleet's trials."""

    @model_validator(mode="after")
    def _no_roles(self) -> PoolFleet:
        tagged = next((i for i, host in enumerate(self.hosts) if host.role is not None), None)
        if tagged is not None:
            raise ValueError(
                f"fleet.hosts[{tagged}].role is set, but a pool's hosts serve every candidate; remove it"
                " and let the candidates' fleet.disaggregation.prefill.workers give the roles"
            )
        return self


class PoolHost(FileSection):
    """One host of the pool: its host section, as in a stack file, and the server port it uses; or,
    for a base stack with a fleet, the fleet's hosts and router (``fleet``)."""

    name: str = Field(pattern=NAME_PATTERN)
    """Short name shown in the progress table and the report."""
    host: HostSpec | None = None
    """The ``sglang-stacks:host`` section of the trials that run here."""
    fleet: PoolFleet | None = None
    """Instead of ``host``: the hosts and router of a fleet, for a base stack with a fleet section."""
    port: int = Field(default=30000, ge=1, le=65535)
    """The server's port on this host (hosts sharing an address need different ports)."""
    emulator_state_dir: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_./~-]+$")
    """Where this host's emulated GPUs record their memory (emulator hosts on one machine need
    their own folder each, like their own ``host.state_dir``)."""
    ssh_key_stack: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    """The stack whose ``sshPrivateKey`` secret the trials on this host get (ssh only; default: the
    campaign's ``base``). ``sweep run`` copies it to each trial stack as a secret, encrypted for
    that stack; the key itself never appears in the campaign, a command line or a log."""

    @model_validator(mode="after")
    def _key_needs_ssh(self) -> PoolHost:
        if (self.host is None) == (self.fleet is None):
            raise ValueError(
                "a pool entry has either host (a trial is a server on it) or fleet (a trial is a fleet on"
                " its hosts); set one of them"
            )
        if self.ssh_key_stack is not None and not self.needs_ssh_key:
            raise ValueError(
                "ssh_key_stack applies to a host of kind: ssh only; remove it or set host.kind: ssh"
            )
        return self

    @property
    def machines(self) -> list[HostSpec]:
        """The hosts a trial here runs on: the host, or every host of the fleet."""
        if self.fleet is not None:
            return list(self.fleet.hosts)
        assert self.host is not None  # one of the two (checked)
        return [self.host]

    @property
    def gpu_count(self) -> int:
        """The GPUs a trial here holds: every GPU of its hosts."""
        return sum(machine.gpu_count for machine in self.machines)

    @property
    def needs_ssh_key(self) -> bool:
        """Whether a trial here logs in over SSH (some host is of kind ssh)."""
        return any(machine.needs_ssh_key for machine in self.machines)

    def key_stack(self, base: str) -> str | None:
        """The stack to copy the SSH key from; None when the host needs none."""
        return (self.ssh_key_stack or base) if self.needs_ssh_key else None


def check_pool(pool: Sequence[PoolHost]) -> None:
    """ValueError unless every pool host has its own name, host and port, and GPU claim, and all
    declare like GPUs."""
    names = [h.name for h in pool]
    if len(set(names)) != len(names):
        raise ValueError(f"pool host names {names} repeat; give each host its own name")
    if len({h.fleet is None for h in pool}) > 1:
        raise ValueError("the pool mixes hosts and fleets; a campaign's trials are all servers or all fleets")
    places = [(m.kind, m.address, _server_port(h, m)) for h in pool for m in h.machines]
    if len(set(places)) != len(places):
        raise ValueError("two pool hosts share a host and port; give each its own port")
    dirs = [(m.kind, m.address, m.state_dir) for h in pool for m in h.machines]
    if len(set(dirs)) != len(dirs):
        raise ValueError("two pool hosts share host.state_dir (and so one GPU claim); give each its own")
    routers = [(h.fleet.router.port, h.fleet.router.metrics_port) for h in pool if h.fleet is not None]
    if len({port for pair in routers for port in pair}) != 2 * len(routers):
        raise ValueError(
            "a router port repeats in the pool; give each fleet's router its own port and metrics_port"
        )
    facts = {
        m.model_dump(include={"gpu_model", "gpu_count", "compute_capability"}).__repr__()
        for h in pool
        for m in h.machines
    }
    if len(facts) > 1:
        raise ValueError("pool hosts differ in GPUs; a campaign compares configurations on like hosts")
    sizes = {len(h.machines) for h in pool}
    if len(sizes) > 1:
        raise ValueError("pool fleets differ in hosts; give every fleet of the pool as many hosts")


def describe_pool(pool: Sequence[PoolHost], *, names: bool = True) -> str:
    """``2 pool hosts (a, b)``, or for fleets ``1 pool fleet of 3 hosts (trio)``."""
    unit = "pool fleet" if pool[0].fleet is not None else "pool host"
    said = f"{len(pool)} {unit}{'s' if len(pool) != 1 else ''}"
    if pool[0].fleet is not None:
        said += f" of {len(pool[0].machines)} hosts"
    return f"{said} ({', '.join(h.name for h in pool)})" if names else said


def _server_port(entry: PoolHost, machine: HostSpec) -> int | None:
    """The server port a trial uses on ``machine`` of pool entry ``entry``."""
    if isinstance(machine, FleetHostSpec):
        return machine.server_port
    return entry.port


def check_storage(storage: str | None) -> None:
    """ValueError when the study's URL holds a password (it would sit in the campaign file)."""
    if storage is not None and re.match(r"^[a-z0-9+]+://[^/@]*:[^/@]*@", storage):
        raise ValueError(
            "storage holds a password, which would sit in plain text in the campaign file; remove it "
            "from the URL and put it in ~/.pgpass (or PGPASSWORD) on each driver's machine"
        )
