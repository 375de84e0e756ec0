"""Where a campaign runs and keeps its state (``pool`` and ``storage`` in its file): the pool's
hosts, checked to be like hosts in distinct places, and a study URL that holds no password.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import Field, model_validator

from sglang_stacks.campaign.model_axes import NAME_PATTERN
from sglang_stacks.config.docstrings import FileSection
from sglang_stacks.config.spec import HostSpec

__all__ = ["PoolHost", "check_pool", "check_storage"]


class PoolHost(FileSection):
    """One host of the pool: its host section, as in a stack file, and the server port it uses."""

    name: str = Field(pattern=NAME_PATTERN)
    """Short name shown in the progress table and the report."""
    host: HostSpec
    """The ``sglang-stacks:host`` section of the trials that run here."""
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
        if self.ssh_key_stack is not None and not self.host.needs_ssh_key:
            raise ValueError(
                "ssh_key_stack applies to a host of kind: ssh only; remove it or set host.kind: ssh"
            )
        return self

    def key_stack(self, base: str) -> str | None:
        """The stack to copy the SSH key from; None when the host needs none."""
        return (self.ssh_key_stack or base) if self.host.needs_ssh_key else None


def check_pool(pool: Sequence[PoolHost]) -> None:
    """ValueError unless every pool host has its own name, host and port, and GPU claim, and all
    declare like GPUs."""
    names = [h.name for h in pool]
    if len(set(names)) != len(names):
        raise ValueError(f"pool host names {names} repeat; give each host its own name")
    places = [(h.host.kind, h.host.address, h.port) for h in pool]
    if len(set(places)) != len(places):
        raise ValueError("two pool hosts share a host and port; give each its own port")
    dirs = [(h.host.kind, h.host.address, h.host.state_dir) for h in pool]
    if len(set(dirs)) != len(dirs):
        raise ValueError("two pool hosts share host.state_dir (and so one GPU claim); give each its own")
    facts = {
        h.host.model_dump(include={"gpu_model", "gpu_count", "compute_capability"}).__repr__() for h in pool
    }
    if len(facts) > 1:
        raise ValueError("pool hosts differ in GPUs; a campaign compares configurations on like hosts")


def check_storage(storage: str | None) -> None:
    """ValueError when the study's URL holds a password (it would sit in the campaign file)."""
    if storage is not None and re.match(r"^[a-z0-9+]+://[^/@]*:[^/@]*@", storage):
        raise ValueError(
            "storage holds a password, which would sit in plain text in the campaign file; remove it "
            "from the URL and put it in ~/.pgpass (or PGPASSWORD) on each driver's machine"
        )
