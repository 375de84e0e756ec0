"""The GPU host: what it really is (probed with nvidia-smi and checked against the stack's declared
facts), and which stack owns its GPUs (the claim, handed over between stacks).
"""

from __future__ import annotations

from typing import Annotated

import pulumi

from sglang_stacks.components._refresh import HOST_READS
from sglang_stacks.errors import FlagError, HostError
from sglang_stacks.hostops import claim, probe
from sglang_stacks.hostops.facts import FACT_KEYS, DeclaredFacts, FoundFacts
from sglang_stacks.hostops.process import stop_recorded
from sglang_stacks.resources.provider import LABEL, UPDATES, HostInputs, Props, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for

__all__ = [
    "FACT_KEYS",
    "ClaimArgs",
    "ClaimInputs",
    "ClaimOutputs",
    "ClaimProvider",
    "DeclaredFacts",
    "FoundFacts",
    "GpuClaim",
    "HostProbe",
    "ProbeArgs",
    "ProbeInputs",
    "ProbeOutputs",
    "ProbeProvider",
    "check_installed_release",
]


class ProbeInputs(HostInputs):
    """What the probe checks the host against."""

    declared: Annotated[DeclaredFacts, UPDATES]
    """The stack's declared facts."""
    nvidia_smi: Annotated[tuple[str, ...], UPDATES]
    """The nvidia-smi command as argv words (the emulator host's stand-in on the emulator)."""


class ProbeOutputs(Props):
    """What the probe found."""

    facts: FoundFacts
    """GPU model, count, memory per GPU (MiB), compute capability, interconnect, driver."""


def check_host(inputs: ProbeInputs) -> ProbeOutputs:
    """Probes the host; HostError naming every difference from the declared facts."""
    conn = inputs.connection
    found = probe.probe(conn, nvidia_smi=inputs.nvidia_smi)
    problems = probe.compare_facts(inputs.declared, found)
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise HostError(f"{conn.label} is not the host this stack declares; nothing was launched:\n{listed}")
    return ProbeOutputs(facts=FoundFacts.of(found))


class ProbeProvider(TypedProvider[ProbeInputs, ProbeOutputs]):
    """Probes the host on create, on every changed input and on every refresh."""

    gathers_with = HOST_READS

    inputs = ProbeInputs
    outputs = ProbeOutputs
    stables = ("facts",)

    def resource_id(self, inputs: ProbeInputs, outputs: ProbeOutputs) -> str:
        return "probe"

    def create_typed(self, inputs: ProbeInputs) -> ProbeOutputs:
        return check_host(inputs)

    def update_typed(self, olds: ProbeOutputs, old_inputs: ProbeInputs, news: ProbeInputs) -> ProbeOutputs:
        return check_host(news)

    def read_typed(self, inputs: ProbeInputs, outputs: ProbeOutputs) -> ProbeOutputs:
        # A refresh probes again: a GPU that fell off the bus shows up as an error here.
        return check_host(inputs)


ProbeArgs = args_for(ProbeInputs)
"""`HostProbe`'s arguments: the fields of `ProbeInputs`, each a value or an Output of one."""


class HostProbe(TypedResource[ProbeInputs, ProbeOutputs], module="sglang", name="HostProbe"):
    """The host's GPUs as nvidia-smi reports them, checked against the declared facts; its output is
    `ProbeOutputs`."""

    def __init__(
        self, name: str, args: Args[ProbeInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(ProbeProvider(), name, args, opts)


class ClaimInputs(HostInputs):
    """Which stack claims the host, and how a previous owner's server is stopped."""

    stack: Annotated[str, UPDATES]
    """The stack that claims the GPUs."""
    state_dir: Annotated[str, UPDATES]
    """The folder on the host that holds the claim."""
    takeover: Annotated[bool, UPDATES] = True
    """Whether an idle claim of another stack may be taken over (its server stopped first)."""
    update_id: Annotated[str, LABEL] = ""
    """The update that holds the claim: new on every run, recorded on the host, never a change."""
    nvidia_smi: Annotated[tuple[str, ...], LABEL] = ("nvidia-smi",)
    """How to see GPU memory free after stopping a previous owner's server."""
    stop_timeout_s: Annotated[float, LABEL] = 120.0
    """How long a previous owner's server may take to stop and free its GPU memory."""
    release: Annotated[str, LABEL] = ""
    """The SGLang release the stack's flags are rendered for."""
    installed_version: Annotated[str, LABEL] = ""
    """The release the environment installed: a mismatch stops the update before the takeover."""


class ClaimOutputs(Props):
    """Who owns the GPUs as last seen."""

    owner: str
    """The stack that owns the GPUs: this one after an update, another after a refresh that found
    the host handed over, empty when no stack does."""
    taken_from: str
    """The stack whose serving server was stopped when this stack took the host, if any."""
    taken_in_update: str = ""
    """The update that took the host from ``taken_from``."""


def take_claim(inputs: ClaimInputs) -> ClaimOutputs:
    """Claims the GPUs for this stack; a previous owner's server is stopped first.

    Runs after everything that can fail without the GPUs (probe, environment, draft model), and
    checks the installed release first: another stack's server is stopped only for a launch that
    has nothing left to fail on but the launch itself.
    """
    conn = inputs.connection
    if inputs.installed_version:
        check_installed_release(conn.label, inputs.release, inputs.installed_version)
    previous = claim.acquire(
        conn, inputs.stack, takeover=inputs.takeover, update_id=inputs.update_id, state_dir=inputs.state_dir
    )
    # Only a server that was serving is one the previous stack can be told to restore: a stack
    # whose launch failed, or whose server had died, lost nothing here.
    if previous is None or not stop_recorded(
        conn, previous, inputs.nvidia_smi, inputs.stop_timeout_s, inputs.state_dir
    ):
        return ClaimOutputs(owner=inputs.stack, taken_from="")
    return ClaimOutputs(owner=inputs.stack, taken_from=previous.stack, taken_in_update=inputs.update_id)


class ClaimProvider(TypedProvider[ClaimInputs, ClaimOutputs]):
    """Takes the claim on create and update, reads it on refresh, releases it on delete."""

    gathers_with = HOST_READS

    inputs = ClaimInputs
    outputs = ClaimOutputs

    def resource_id(self, inputs: ClaimInputs, outputs: ClaimOutputs) -> str:
        return inputs.stack

    def create_typed(self, inputs: ClaimInputs) -> ClaimOutputs:
        return take_claim(inputs)

    def update_typed(self, olds: ClaimOutputs, old_inputs: ClaimInputs, news: ClaimInputs) -> ClaimOutputs:
        return take_claim(news)

    def drifted(self, outputs: ClaimOutputs, news: ClaimInputs) -> bool:
        # A claim that another stack took (seen on refresh) is taken back.
        return outputs.owner != news.stack

    def read_typed(self, inputs: ClaimInputs, outputs: ClaimOutputs) -> ClaimOutputs:
        current = claim.read(inputs.connection, state_dir=inputs.state_dir)
        return outputs.model_copy(update={"owner": current.stack if current else ""})

    def delete_typed(self, inputs: ClaimInputs, outputs: ClaimOutputs) -> None:
        claim.release(inputs.connection, inputs.stack, state_dir=inputs.state_dir)


def check_installed_release(label: str, release: str, installed: str) -> None:
    """FlagError when the flags were rendered for another release than the host has."""
    if installed != release:
        raise FlagError(
            f"The flags were rendered for SGLang {release}, but {label} has {installed} installed. "
            f"Set environment.sglang_release to {installed!r}, or let the environment install {release}."
        )


ClaimArgs = args_for(ClaimInputs)
"""`GpuClaim`'s arguments: the fields of `ClaimInputs`, each a value or an Output of one."""


class GpuClaim(TypedResource[ClaimInputs, ClaimOutputs], module="sglang", name="GpuClaim"):
    """This stack's exclusive claim of the host's GPUs, recorded on the host; its outputs are
    `ClaimOutputs`."""

    def __init__(
        self, name: str, args: Args[ClaimInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(ClaimProvider(), name, args, opts)
