"""The ``sglang-stacks:fleet`` section: several servers of one configuration behind SGLang's
router (the ``sglang-router`` package), and how a change rolls over them.

Every host runs one replica: the stack's server flags, with its own HTTP port. On a Kubernetes
cluster (``sglang-stacks:host`` of kind ``kubernetes``) the fleet lists no hosts: its ``replicas``
are server pods of the cluster, replica i on port ``server.port + i``. The router spreads requests
over them; a rolling update takes replicas out of the router a batch at a time.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sglang_stacks.config.disaggregation import DisaggregationSpec, Role, role_problems
from sglang_stacks.config.docstrings import FileSection
from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.config.sections import HostSpec

ROUTER_RELEASE = "0.3.2"
"""The sglang-router release the project pins (requirements.txt, the ``fleet`` extra)."""


class FleetHostSpec(HostSpec):
    """One host of the fleet: a host section as ``sglang-stacks:host`` has it, plus its server port."""

    server_port: int | None = Field(default=None, ge=1, le=65535)
    """The replica's HTTP port on this host; default ``server.port`` (or 30000). Hosts that share a
    machine (emulator hosts, one test machine) need one each."""

    node_address: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.:_-]+$")
    """Multi-node: the address the other nodes of its server reach this host at (on the network
    NCCL uses); default the address the router uses. Rank 0's is the init address."""

    role: Role | None = None
    """In a disaggregated fleet (``fleet.disaggregation``), what this host's worker does: ``prefill``
    or ``decode``."""

    bootstrap_port: int | None = Field(default=None, ge=1, le=65535)
    """A prefill host's bootstrap server port; default ``fleet.disaggregation.bootstrap_port``.
    Prefill hosts that share a machine need one each."""

    @property
    def worker_address(self) -> str:
        """Where the router reaches the replica: the SSH address, or this machine for the emulator."""
        return self.address if self.kind == "ssh" and self.address else "127.0.0.1"


class RouterSpec(FileSection):
    """SGLang's router in front of the replicas; it runs on the machine that runs ``pulumi up``, or,
    for a fleet on a Kubernetes cluster, as a pod of the cluster."""

    host: str = Field(default="127.0.0.1", pattern=r"^[A-Za-z0-9.:_-]+$")
    """The address the router listens on; on a Kubernetes cluster, left out, every address of its
    pod's node (``0.0.0.0``), where the router's Service reaches it."""
    port: int = Field(default=30100, ge=1, le=65535)
    """The router's HTTP port: clients send their requests here."""
    metrics_port: int = Field(default=29000, ge=1, le=65535)
    """The router's Prometheus metrics port (``--prometheus-port``); one per router on a machine."""
    policy: Literal["random", "round_robin", "cache_aware", "power_of_two"] = "cache_aware"
    """sglang-router's load-balancing policy (``--policy``)."""
    release: str = Field(default=ROUTER_RELEASE, pattern=r"^[0-9][A-Za-z0-9.+-]*$")
    """The sglang-router release to run; the installed one must match (``pip install
    sglang-router==<release>``)."""
    health_check_interval_s: int = Field(default=2, ge=1, le=3600)
    """How often the router checks each worker's health (``--health-check-interval-secs``)."""
    drain_timeout_s: float = Field(default=120.0, gt=0)
    """How long a worker taken out of the router may take to finish its requests before it stops."""
    state_dir: str = Field(default="~/.sglang-stacks/router", pattern=r"^[A-Za-z0-9_./~-]+$")
    """Folder for the router's log and pid file; on a Kubernetes cluster (where the router's log is
    its pod's), for the canary gate's and the replicas' own benchmarks, run from this machine."""


class RolloutSpec(FileSection):
    """How a change rolls over the fleet: in batches, the first one a canary behind a gate."""

    batch_size: int = Field(default=1, ge=1)
    """Hosts replaced at a time; the others keep serving through the router."""
    canary: bool = True
    """Judge the first batch's first replica before the rest proceeds: it is benchmarked beside a
    replica still on the current configuration (the next batch's first), both out of the router at
    the same moment, so one more replica than the batch is out for that benchmark."""
    tok_s_tolerance_pct: float | None = Field(default=5.0, ge=0, le=100)
    """The canary may be this much slower in tok/s than the current replica; none: not judged."""
    ttft_tolerance_pct: float | None = Field(default=None, ge=0)
    """The canary's median TTFT may be this much higher; none: not judged."""
    launch_cv_pct: float | None = Field(default=None, ge=0, le=50)
    """How much tok/s moves from one host to another (coefficient of variation, percent): the canary
    and the reference run on two hosts, so the comparison allows for it. Default: the project's
    measured floor."""
    on_regression: Literal["roll_back", "stop"] = "roll_back"
    """After a regressed canary, ``sglang-stacks rollout`` relaunches the changed hosts on the
    fleet's current configuration and puts them back in the router (``roll_back``), or leaves them
    out of it (``stop``). A plain ``pulumi up`` always stops."""

    @model_validator(mode="after")
    def _judges_something(self) -> RolloutSpec:
        if self.canary and self.tok_s_tolerance_pct is None and self.ttft_tolerance_pct is None:
            raise ValueError(
                "a canary needs a gate: set tok_s_tolerance_pct and/or ttft_tolerance_pct, or canary: false"
            )
        return self


def _first_clash(places: list[tuple[object, ...]]) -> tuple[int, int] | None:
    """The indexes of the first two equal entries of ``places``, or None."""
    seen: dict[tuple[object, ...], int] = {}
    for index, place in enumerate(places):
        if place in seen:
            return seen[place], index
        seen[place] = index
    return None


class FleetSpec(FileSection):
    """``sglang-stacks:fleet``: the hosts, one replica each, the router and the rollout policy."""

    hosts: list[FleetHostSpec] = Field(default_factory=list)
    """The hosts, each a host section; replica i runs on hosts[i]. A fleet on a Kubernetes cluster
    lists none: its replicas are pods of the cluster ``sglang-stacks:host`` names."""
    replicas: int | None = Field(default=None, ge=1, le=64)
    """How many servers: with hosts, it must equal the number of hosts over ``nodes_per_replica``;
    on a Kubernetes cluster, the number of server pods (replica i serves on ``server.port + i``)."""
    nodes_per_replica: int = Field(default=1, ge=1, le=64)
    """Hosts one server spans (SGLang's ``--nnodes``): replica k runs on hosts k*n .. k*n+n-1, node
    rank 0 first; ``server.tp_size`` is the total over them."""
    dist_init_port: int = Field(default=20000, ge=1, le=65000)
    """Multi-node: the port of rank 0's rendezvous (``--dist-init-addr <rank 0 host>:<port>``);
    replica k uses ``dist_init_port + k``, so replicas sharing a machine do not collide."""
    socket_ifname: str | None = Field(default=None, pattern=r"^\^?[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*$")
    """Multi-node: the network interface NCCL and Gloo use between nodes (``NCCL_SOCKET_IFNAME``
    and ``GLOO_SOCKET_IFNAME`` on every node), like ``eth0`` or ``ib0``."""
    disaggregation: DisaggregationSpec | None = None
    """Prefill/decode disaggregation: each host serves as a prefill or a decode worker (its
    ``role``), and the router pairs them (its PD mode)."""
    router: RouterSpec = Field(default_factory=RouterSpec)
    """SGLang's router in front of the replicas."""
    benchmark_replicas: bool = True
    """A fleet of hosts: benchmark each aggregated replica on its own before it joins the router (its
    ``tok_s`` in the outputs; what the canary gate measures). False: the fleet is measured through
    the router only, as a campaign's trial fleets are (a disaggregated fleet's workers always are)."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """How a change rolls over the hosts."""

    @model_validator(mode="after")
    def _hosts_fit(self) -> FleetSpec:
        nodes, count = self.nodes_per_replica, len(self.hosts)
        if not self.hosts and self.replicas is None:
            raise ValueError(
                "a fleet needs its servers: list its hosts in fleet.hosts (one replica each), or, for "
                "replicas as pods of a Kubernetes cluster, set fleet.replicas and a sglang-stacks:host of "
                "kind: kubernetes"
            )
        if count % nodes:
            raise ValueError(
                f"nodes_per_replica is {nodes} but {count} host(s) are listed; every server spans "
                f"{nodes} hosts: list a multiple of {nodes} hosts or change nodes_per_replica"
            )
        if self.hosts and self.replicas is not None and self.replicas != count // nodes:
            per = "on its own host" if nodes == 1 else f"over {nodes} hosts (nodes_per_replica)"
            raise ValueError(
                f"replicas is {self.replicas} but {count} host(s) are listed; each replica runs {per}: "
                f"list {self.replicas * nodes} hosts or set replicas: {count // nodes}"
            )
        clash = _first_clash([(h.worker_address, h.server_port) for h in self.hosts])
        if clash:
            first, second = clash
            port = self.hosts[first].server_port
            raise ValueError(
                f"hosts[{first}] and hosts[{second}] both serve on {self.hosts[first].worker_address} port "
                f"{port if port is not None else '(server.port)'}; give each host on one machine its own "
                "server_port"
            )
        clash = _first_clash([(h.worker_address, h.port, h.state_dir) for h in self.hosts])
        if clash:
            first, second = clash
            raise ValueError(
                f"hosts[{first}] and hosts[{second}] are on one machine and share the state_dir "
                f"{self.hosts[first].state_dir}, so their GPU claims would collide; give each its own "
                "state_dir"
            )
        ports = self.bootstrap_ports() if self.hosts else {}  # a cluster's are apart by construction
        clash = _first_clash([(self.hosts[i].worker_address, port) for i, port in ports.items()])
        if clash:
            first, second = (list(ports)[i] for i in clash)
            raise ValueError(
                f"hosts[{first}] and hosts[{second}] are prefill workers on "
                f"{self.hosts[first].worker_address} with the same bootstrap port {ports[first]};"
                " give each its own bootstrap_port"
            )
        batches = self.batches()
        replicas_judged = self.disaggregation is None  # a disaggregated fleet's canary runs in pairs
        if self.rollout.canary and len(batches) > 1 and not self.benchmark_replicas and replicas_judged:
            raise ValueError(
                "rollout.canary judges the canary by its own benchmark, which benchmark_replicas: false "
                "leaves out; set benchmark_replicas: true or rollout.canary: false"
            )
        if self.rollout.canary and len(batches) > 1 and self.replica_count - len(batches[0]) < 2:
            raise ValueError(
                "rollout.canary measures the canary beside a replica on the current configuration, both "
                f"out of the router, while another replica serves; with {self.replica_count} replicas and "
                f"batch_size {self.rollout.batch_size} none would serve meanwhile. Add a host, lower "
                "rollout.batch_size, or set rollout.canary: false"
            )
        return self

    def host_flags(self, index: int, server: ServerFlags) -> ServerFlags:
        """``server`` as host ``index`` launches it: with its port, and in a disaggregated fleet its
        role's flags."""
        entry = self.hosts[index]
        if entry.server_port is not None:
            server = server.model_copy(update={"port": entry.server_port})
        role = self.roles()[index]
        if self.disaggregation is not None and role is not None:
            server = self.disaggregation.flags(server, role, self.bootstrap_ports().get(index))
        return server

    def roles(self) -> list[Role | None]:
        """Each host's role: its own ``role``, or the one ``fleet.disaggregation``'s ``workers``
        counts give it (a disaggregated fleet's hosts in order, prefill first). On a cluster, each
        replica's, from the counts only."""
        own: list[Role | None] = [host.role for host in self.hosts] or [None] * self.replica_count
        if self.disaggregation is None:
            return own
        counted = self.disaggregation.counted_roles(len(own))
        return own if counted is None else list(counted)

    def role_problems(self, server: ServerFlags) -> list[str]:
        """What is wrong with the hosts' roles and ``fleet.disaggregation`` beside the stack's server
        section, each a sentence naming the key and the fix."""
        canary = self.rollout.canary and self.disaggregation is not None
        own = [host.role for host in self.hosts]
        roles = self.roles()
        found = []
        if self.disaggregation is not None and not self.hosts:
            if not any(roles):
                return [
                    "a disaggregated fleet on a cluster counts its workers: set "
                    "fleet.disaggregation.prefill.workers (the first replicas; the rest decode)"
                ]
            if canary:
                return [
                    "fleet.rollout.canary with fleet.disaggregation on a cluster is not built yet; set "
                    "rollout.canary: false (the fleet is measured through its router)"
                ]
        if any(own) and roles != own:
            found.append(
                "fleet.hosts name their roles and fleet.disaggregation's workers counts give them others;"
                " keep one: the hosts' role, or prefill.workers / decode.workers"
            )
        return found + role_problems(self.disaggregation, roles, self.nodes_per_replica, canary, server)

    def bootstrap_ports(self) -> dict[int, int]:
        """Each prefill host's bootstrap port by host index (none without disaggregation)."""
        if self.disaggregation is None:
            return {}
        default = self.disaggregation.bootstrap_port
        roles = self.roles()
        if not self.hosts:  # a cluster's replicas share their nodes' ports: one each
            return {i: default + i for i, role in enumerate(roles) if role == "prefill"}
        return {i: h.bootstrap_port or default for i, h in enumerate(self.hosts) if roles[i] == "prefill"}

    @property
    def replica_count(self) -> int:
        """Servers in the fleet: the hosts over ``nodes_per_replica``, or on a cluster ``replicas``."""
        if not self.hosts:
            return self.replicas or 0
        return len(self.hosts) // self.nodes_per_replica

    def replica_hosts(self, replica: int) -> list[int]:
        """The host indexes of replica ``replica``, node rank 0 first."""
        first = replica * self.nodes_per_replica
        return list(range(first, first + self.nodes_per_replica))

    def batches(self) -> list[list[int]]:
        """The replica indexes in rollout order (with one node per replica, the host indexes): the
        canary batch first, then ``batch_size`` at a time."""
        size, count = self.rollout.batch_size, self.replica_count
        return [list(range(start, min(start + size, count))) for start in range(0, count, size)]
