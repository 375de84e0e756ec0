"""The spec turned into what the resources take: the SSH connection as pulumi-command's
``ConnectionArgs``, the launch flags as recorded values, how nvidia-smi runs on the host, and the
emulator's variables. Shared by every component that builds servers from a stack spec."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pulumi

from sglang_stacks.components.environment import PythonEnvironment
from sglang_stacks.components.server import upgrade_flags
from sglang_stacks.config import render
from sglang_stacks.config.flags import FlagValue
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import SpecError, StacksError
from sglang_stacks.hostops import serving
from sglang_stacks.hostops.connection import Connection

if TYPE_CHECKING:
    from pulumi_command.remote import ConnectionArgs

__all__ = [
    "connection_args",
    "emulator_env",
    "flags_digest",
    "nvidia_smi_command",
    "options_of",
    "render_flags",
    "served_now",
]


def connection_args(spec: StackSpec, ssh_private_key: pulumi.Output[str] | None) -> ConnectionArgs | None:
    """The stack file's host section as pulumi-command's ``ConnectionArgs`` (``None`` for the
    emulator host); SpecError when an SSH host has no key."""
    host = spec.host
    if host.kind == "emulator":
        return None
    if ssh_private_key is None:
        raise SpecError(
            "This stack deploys over SSH but has no key. Set it with "
            "`pulumi config set --secret sshPrivateKey < ~/.ssh/id_ed25519`."
        )
    from pulumi_command.remote import ConnectionArgs  # only SSH stacks pay for the import

    conn = Connection.for_host(host)  # the key stays an Output, a secret
    return ConnectionArgs(
        host=conn.host,
        port=conn.port,
        user=conn.user,
        host_key=conn.host_key,
        private_key=ssh_private_key,
        per_dial_timeout=int(conn.connect_timeout_s),  # whole seconds in the host section
    )


def render_flags(spec: StackSpec) -> dict[str, FlagValue]:
    """The stack's launch flags as the server records them (canonical name -> value); errors name
    the flag. Rendered for the declared release, so a preview shows every flag; the server checks
    at launch that the host really has that release."""
    return render.launch_values(spec.launch_flags(), spec.environment.sglang_release)


def options_of(flags: Mapping[str, Any], release: str) -> dict[str, Any]:
    """Launch values keyed by the release's option spelling, as a person reads them."""
    values = upgrade_flags({"flags": flags, "release": release})["flags"]
    shown: dict[str, Any] = {}
    for name, value in values.items():
        try:
            shown[render.resolve_flag(name, release).long_name] = value
        except StacksError:
            shown[name] = value
    return shown


def served_now(conn: Connection, state_dir: str, release: str) -> dict[str, Any] | None:
    """The note of the server the host serves now, with its ``release`` (``release`` when the note
    names none) and its ``flags`` as that release's options, or None when it serves nothing of
    sglang-stacks: what a preview compares a stack's flags with."""
    current = serving.read(conn, state_dir)
    if current is None:
        return None
    theirs = str(current.get("release", release))
    return {**current, "release": theirs, "flags": options_of(current.get("flags", {}), theirs)}


def emulator_env(spec: StackSpec) -> dict[str, str]:
    """The emulator's settings as its variables; none for a real SGLang host."""
    release = spec.environment.sglang_release
    return spec.environment.emulator.variables(release) if spec.runtime == "emulator" else {}


def nvidia_smi_command(spec: StackSpec, environment: PythonEnvironment) -> pulumi.Input[Sequence[str]]:
    """How nvidia-smi runs on the host: the real one, or the emulator's stand-in in its venv."""
    if spec.runtime != "emulator":
        return ["nvidia-smi"]
    variables = [f"{key}={value}" for key, value in sorted(emulator_env(spec).items())]
    return environment.python.apply(
        lambda python: ["env", *variables, python, "-m", "sglang_emulator.nvidia_smi"]
    )


def flags_digest(flag_values: Mapping[str, Any]) -> str:
    """A short digest of the launch flags: equal digests, equal configurations."""
    return hashlib.sha256(json.dumps(flag_values, sort_keys=True).encode()).hexdigest()[:16]
