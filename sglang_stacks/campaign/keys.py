"""The secrets a trial stack gets: the SSH key of its pool host (``kind: ssh`` hosts), checked before
a sweep launches anything, and the base stack's hub token, when it has one.

A stack file holds its host's key as the Pulumi secret ``sshPrivateKey`` (set with ``pulumi config
set --secret sshPrivateKey < ~/.ssh/id_ed25519``). A pool host names the stack that holds its key
(``ssh_key_stack``, default the campaign's base stack), and each trial on that host gets a copy,
re-encrypted for the trial's stack by the Pulumi CLI. The key is never in the campaign file, the
sweep file, a log or a command line. The hub token (``hubToken``: gated models download with it)
is copied the same way from the base stack to every trial, whatever its host.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.config.stackfile import read_stack_file
from sglang_stacks.drive import automation
from sglang_stacks.errors import SpecError

if TYPE_CHECKING:
    from pulumi import automation as auto

__all__ = ["HUB_TOKEN", "SSH_KEY", "check_pool_keys", "give_secrets"]

SSH_KEY = "sshPrivateKey"
"""The config key (a Pulumi secret) of a stack's SSH private key."""
HUB_TOKEN = "hubToken"
"""The config key (a Pulumi secret) of a stack's model-hub token."""


def check_pool_keys(campaign: CampaignSpec, stacks_dir: Path) -> None:
    """Raise SpecError, naming the pool host's key and the fix, when an ssh pool host's key stack
    has no stack file or no ``sshPrivateKey`` secret in it."""
    for index, pool_host in enumerate(campaign.pool):
        source = pool_host.key_stack(campaign.base)
        if source is None:
            continue
        where = f"pool.{index}.ssh_key_stack" + ("" if pool_host.ssh_key_stack else " (default: base)")
        try:
            secrets = read_stack_file(source, stacks_dir).secret_keys
        except SpecError as error:
            raise SpecError(f"{where} names stack {source!r}, which cannot be read: {error}") from None
        if SSH_KEY not in secrets:
            raise SpecError(
                f"{where} is {source!r}, whose stack file has no {SSH_KEY} secret: the trials on pool "
                f"host {pool_host.name} would have no key to log in with. Set it with "
                f"`pulumi config set --secret {SSH_KEY} -s {source} < ~/.ssh/id_ed25519`, or name a stack "
                f"that has it in {where}."
            )


def give_secrets(trial: auto.Stack, pool_host: PoolHost, base: str, stacks_dir: Path) -> None:
    """Copy into the trial stack's config, as secrets: the pool host's key (ssh hosts only), and the
    base stack's hub token when it has one."""
    source = pool_host.key_stack(base)
    if source is not None:
        automation.copy_secret(trial, SSH_KEY, source)
    if HUB_TOKEN in read_stack_file(base, stacks_dir).secret_keys:
        automation.copy_secret(trial, HUB_TOKEN, base)
