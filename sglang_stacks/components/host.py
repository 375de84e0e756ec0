"""The GPU host: how it is reached, what it really is (probed with nvidia-smi and checked against the
stack's declared facts), and which stack owns its GPUs (the claim, handed over between stacks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi.dynamic as dynamic

from sglang_stacks.components._resource import connect, keep_connection_secret, plain_errors
from sglang_stacks.errors import HostError
from sglang_stacks.hostops import claim, probe
from sglang_stacks.hostops.process import stop_recorded

# The facts a stack declares and the probe checks; all are stable across probes.
FACT_KEYS = ("gpu_model", "gpu_count", "memory_per_gpu_mib", "compute_capability", "interconnect")


class _Declared:
    """Declared facts as `probe.compare_facts` reads them."""

    def __init__(self, facts: Mapping[str, Any]) -> None:
        self.gpu_model = str(facts["gpu_model"])
        self.gpu_count = int(facts["gpu_count"])
        self.memory_per_gpu_mib = int(facts["memory_per_gpu_mib"])
        self.compute_capability = str(facts["compute_capability"])
        self.interconnect = str(facts["interconnect"])


def check_host(props: Mapping[str, Any]) -> dict[str, Any]:
    """Probes the host; HostError naming every difference from the declared facts."""
    conn = connect(props)
    found = probe.probe(conn, nvidia_smi=props["nvidia_smi"])
    problems = probe.compare_facts(_Declared(props["declared"]), found)
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise HostError(f"{conn.label} is not the host this stack declares; nothing was launched:\n{listed}")
    facts = found.summary()
    return {"facts": {key: facts[key] for key in (*FACT_KEYS, "driver_version")}}


@plain_errors
class _ProbeProvider(dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult("probe", {**props, **check_host(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [key for key in ("connection", "declared", "nvidia_smi") if olds.get(key) != news.get(key)]
        return dynamic.DiffResult(changes=bool(changed), replaces=[], stables=["facts"])

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult({**news, **check_host(news)})

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        # A refresh probes again: a GPU that fell off the bus shows up as an error here.
        return dynamic.ReadResult(id_, {**props, **check_host(props)})


class HostProbe(dynamic.Resource, module="sglang", name="HostProbe"):
    """The host's GPUs as nvidia-smi reports them, checked against the declared facts."""

    facts: pulumi.Output[dict[str, Any]]
    """GPU model, count, memory per GPU (MiB), compute capability, interconnect, driver."""

    def __init__(
        self,
        name: str,
        *,
        connection: pulumi.Input[Mapping[str, Any]],
        declared: Mapping[str, Any],
        nvidia_smi: pulumi.Input[Sequence[str]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "connection": connection,
            "declared": dict(declared),
            "nvidia_smi": nvidia_smi,
            "facts": None,
        }
        super().__init__(_ProbeProvider(), name, props, keep_connection_secret(opts))


def take_claim(props: Mapping[str, Any]) -> dict[str, Any]:
    """Claims the GPUs for this stack; a previous owner's server is stopped first."""
    conn = connect(props)
    previous = claim.acquire(
        conn,
        props["stack"],
        takeover=bool(props["takeover"]),
        update_id=props["update_id"],
        state_dir=props["state_dir"],
    )
    if previous is not None:
        stop_recorded(conn, previous, props["nvidia_smi"], float(props["stop_timeout_s"]), props["state_dir"])
    return {"owner": props["stack"], "taken_from": previous.stack if previous else ""}


@plain_errors
class _ClaimProvider(dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(props["stack"], {**props, **take_claim(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        # The update id is new on every run and alone changes nothing; a claim that another stack
        # took (seen on refresh) is taken back.
        changed = [
            key for key in ("connection", "stack", "takeover", "state_dir") if olds.get(key) != news.get(key)
        ]
        if olds.get("owner") != news["stack"]:
            changed.append("owner")
        return dynamic.DiffResult(changes=bool(changed), replaces=[])

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult({**news, **take_claim(news)})

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        current = claim.read(connect(props), state_dir=props["state_dir"])
        return dynamic.ReadResult(id_, {**props, "owner": current.stack if current else ""})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        claim.release(connect(props), props["stack"], state_dir=props["state_dir"])


class GpuClaim(dynamic.Resource, module="sglang", name="GpuClaim"):
    """This stack's exclusive claim of the host's GPUs, recorded on the host."""

    owner: pulumi.Output[str]
    """The stack that owns the GPUs as last seen: this stack after an update; another stack after
    a refresh that found the host handed over."""
    taken_from: pulumi.Output[str]
    """The stack whose server was stopped when this stack took the host, if any."""

    def __init__(
        self,
        name: str,
        *,
        connection: pulumi.Input[Mapping[str, Any]],
        stack: str,
        update_id: str,
        nvidia_smi: pulumi.Input[Sequence[str]],
        state_dir: str,
        takeover: bool = True,
        stop_timeout_s: float = 120.0,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "state_dir": state_dir,
            "connection": connection,
            "stack": stack,
            "update_id": update_id,
            "nvidia_smi": nvidia_smi,
            "takeover": takeover,
            "stop_timeout_s": stop_timeout_s,
            "owner": None,
            "taken_from": None,
        }
        super().__init__(_ClaimProvider(), name, props, keep_connection_secret(opts))
