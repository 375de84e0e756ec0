"""The spec turned into what the resources take: the SSH connection as pulumi-command's
``ConnectionArgs``, the launch flags as one canonical typed value, how nvidia-smi runs on the host,
and the emulator's variables. Shared by every component that builds servers from a stack spec."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pulumi

from sglang_stacks.config import render
from sglang_stacks.config.flags import ServerFlags, launch_values
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import SpecError
from sglang_stacks.hostops import probe, serving
from sglang_stacks.hostops.connection import Connection

if TYPE_CHECKING:
    from pulumi_command.remote import ConnectionArgs

__all__ = [
    "config_digest",
    "connection_args",
    "digest",
    "emulator_env",
    "flags_digest",
    "host_connection",
    "launch_flags",
    "nvidia_smi_command",
    "served_now",
    "warn_pending",
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


LOCAL_HOST: dict[str, Any] = {"kind": "local"}
"""The connection of the host this program runs on (the emulator host): no SSH."""


def host_connection(args: ConnectionArgs | None) -> pulumi.Output[Any]:
    """The connection the resources take, from pulumi-command's ``remote.ConnectionArgs`` (the
    object Pulumi users already write for remote commands), or the local host for ``None``.

    Always a secret: it may hold the SSH key. Of ConnectionArgs, ``host``, ``port``, ``user``,
    ``private_key``, ``host_key`` and ``per_dial_timeout`` (the connect timeout, seconds) are
    used; passwords, agents and proxies are not supported.
    """
    if args is None:
        return pulumi.Output.secret(LOCAL_HOST)
    unsupported = [
        name
        for name in ("password", "agent_socket_path", "proxy", "private_key_password")
        if pulumi.get(args, name) is not None
    ]
    if unsupported:
        raise SpecError(
            f"The SSH connection sets {', '.join(unsupported)}, which sglang-stacks does not support. "
            "Connect with a private key (host.* in the stack file and the sshPrivateKey secret)."
        )

    def fields(values: dict[str, Any]) -> dict[str, Any]:
        found = {name: value for name, value in values.items() if value is not None}
        timeout_s = found.pop("per_dial_timeout", None)
        if timeout_s is not None:
            found["connect_timeout_s"] = float(timeout_s)
        return {"kind": "ssh", **found, "port": int(found.get("port", 22))}

    return pulumi.Output.secret(
        pulumi.Output.all(
            host=pulumi.get(args, "host"),
            port=pulumi.get(args, "port"),
            user=pulumi.get(args, "user"),
            private_key=pulumi.get(args, "private_key"),
            host_key=pulumi.get(args, "host_key"),
            per_dial_timeout=pulumi.get(args, "per_dial_timeout"),
        ).apply(fields)
    )


def warn_pending(stack: str, parent: pulumi.Resource) -> None:
    """Warns in `pulumi up` and `preview` when the stack's state holds operations that interrupted
    updates left, which Pulumi keeps without a word. Read from a local backend's state file, before
    the program registers anything that could be pending itself."""
    from sglang_stacks.resources.state import local_pending, pending_warning  # no Automation API

    found = local_pending(pulumi.get_project(), stack)
    if found:
        pulumi.log.warn(pending_warning(stack, [op.label for op in found]), parent)


def launch_flags(spec: StackSpec) -> ServerFlags:
    """The stack's launch flags for its declared release, every flag named canonically: the one
    value the server, the outputs and the preview take. Errors name the flag. The server checks at
    launch that the host really has that release."""
    return render.canonical_flags(spec.launch_flags(), spec.environment.sglang_release)


def served_now(conn: Connection, state_dir: str, release: str) -> serving.ServingNote | None:
    """The note of the server the host serves now (``release`` when the note names none), or None
    when it serves nothing of sglang-stacks: what a preview compares a stack's flags with."""
    return serving.read(conn, state_dir, release)


def emulator_env(spec: StackSpec) -> dict[str, str]:
    """The emulator's settings as its variables; none for a real SGLang host."""
    release = spec.environment.sglang_release
    return spec.environment.emulator.variables(release) if spec.runtime == "emulator" else {}


def nvidia_smi_command(spec: StackSpec, python: pulumi.Output[str]) -> pulumi.Input[Sequence[str]]:
    """How nvidia-smi runs on the host: the real one, or the emulator's stand-in in the venv of
    ``python``."""
    if spec.runtime != "emulator":
        return ["nvidia-smi"]
    variables = emulator_env(spec)
    return python.apply(lambda found: probe.stand_in(variables, found))


def digest(value: Mapping[str, Any]) -> str:
    """A short digest of a configuration's JSON: equal digests, equal configurations."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def flags_digest(flags: ServerFlags) -> str:
    """A short digest of the launch flags: equal digests, equal flags."""
    return digest(launch_values(flags))


def config_digest(spec: StackSpec) -> str:
    """A digest of what every replica's server is launched from (flags, a disaggregated fleet's
    roles, release, pins, variables, emulator settings, draft model): equal digests, the same
    configuration. The router lists it for each worker, so the canary gate knows which
    configuration a replica serves."""
    launched: dict[str, Any] = {
        "flags": launch_values(launch_flags(spec)),
        "environment": spec.environment.model_dump(mode="json"),
        "draft_model": spec.draft_model.model_dump(mode="json") if spec.draft_model else None,
    }
    if spec.fleet is not None and spec.fleet.disaggregation is not None:
        launched["roles"] = spec.fleet.disaggregation.model_dump(mode="json")
    return digest(launched)
