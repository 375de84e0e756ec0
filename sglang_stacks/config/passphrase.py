"""The demo passphrase, and the one rule about it: no secret of a stack is kept under it.

`scripts/env.sh` lets the shipped stacks run in a shell with no passphrase of the user's own by
pointing Pulumi at the demo passphrase, which the README prints. A stack's SSH key or hub token
encrypted with it is readable by anyone who has the stack file, so such a stack is refused before
anything runs, with the way to a passphrase of one's own."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from sglang_stacks.errors import SpecError

DEMO_PASSPHRASE = "sglang-stacks-demo"
"""The shipped stack files' passphrase (their ``encryptionsalt``); none of them holds a secret."""


def passphrase_in_effect(env: Mapping[str, str]) -> str | None:
    """The passphrase Pulumi uses in ``env``: ``PULUMI_CONFIG_PASSPHRASE`` when it is set, else
    the contents of ``PULUMI_CONFIG_PASSPHRASE_FILE`` (as Pulumi reads them), else none."""
    if "PULUMI_CONFIG_PASSPHRASE" in env:
        return env["PULUMI_CONFIG_PASSPHRASE"]
    path = env.get("PULUMI_CONFIG_PASSPHRASE_FILE")
    if not path:
        return None
    try:
        return Path(path).expanduser().read_text().strip()
    except OSError:
        return None  # Pulumi itself says what is wrong with the file


def refuse_secrets_under_the_demo_passphrase(
    stack: str, secret_keys: Iterable[str], env: Mapping[str, str] | None = None
) -> None:
    """Raises SpecError when ``stack`` holds secrets (``secret_keys``, the ones it sets) and the
    passphrase in effect is the demo one."""
    held = sorted(secret_keys)
    if not held or passphrase_in_effect(os.environ if env is None else env) != DEMO_PASSPHRASE:
        return
    keys = " and ".join(f"sglang-stacks:{key}" for key in held)
    raise SpecError(
        f"Stack {stack!r} holds {keys} under the demo passphrase {DEMO_PASSPHRASE!r}, which the README "
        "prints: anyone with its stack file can read them. Use a passphrase of your own: put it in a "
        "file only you can read and `export PULUMI_CONFIG_PASSPHRASE_FILE=<that file>` (with "
        "PULUMI_CONFIG_PASSPHRASE unset), then remove the `encryptionsalt` line and the secret's key from "
        f"stacks/Pulumi.{stack}.yaml and set the secret again with `pulumi config set --secret`."
    )
