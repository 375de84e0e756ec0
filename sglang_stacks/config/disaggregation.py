"""Prefill/decode disaggregation (SGLang's PD mode): a fleet's hosts in two roles behind the router
in PD mode. A prefill worker computes each prompt and serves its KV from its bootstrap port; a
decode worker pulls that KV over the network and decodes. The stack declares the roles once
(``fleet.disaggregation``) and tags each host with its role; this module derives each role's
launch flags and says what a stack may not declare itself.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sglang_stacks.config.docstrings import FileSection
from sglang_stacks.config.flags import ServerFlags, TransferBackend

__all__ = [
    "DEFAULT_BOOTSTRAP_PORT",
    "ROLE_FLAGS",
    "DisaggregationSpec",
    "Role",
    "RoleSpec",
    "declared_role_flags",
    "role_problems",
]

Role = Literal["prefill", "decode"]
"""A worker's role in a disaggregated fleet (SGLang's ``--disaggregation-mode``)."""

DEFAULT_BOOTSTRAP_PORT = 8998
"""SGLang's default ``--disaggregation-bootstrap-port`` in every shipped release."""

ROLE_FLAGS = ("disaggregation_mode", "disaggregation_transfer_backend", "disaggregation_bootstrap_port")
"""The launch flags sglang-stacks sets per role; a stack declares them in ``fleet.disaggregation``."""

# What a role's server section may not change: where the server is and what it serves are the
# fleet's, and the role flags are set from the roles themselves.
_FLEET_OWNED = (
    "model_path",
    "speculative_draft_model_path",
    "host",
    "port",
    "nnodes",
    "node_rank",
    "dist_init_addr",
)


class RoleSpec(FileSection):
    """One role's workers: the launch flags where they differ from ``sglang-stacks:server``."""

    workers: int | None = Field(default=None, ge=1, le=64)
    """How many of ``fleet.hosts`` serve in this role, when the hosts name no ``role`` of their own:
    prefill takes the first hosts, decode the rest (one count is enough; the other is the rest).
    What a campaign varies to search the prefill : decode ratio on a fixed set of hosts."""
    server: ServerFlags = Field(default_factory=ServerFlags)
    """Flags this role's workers launch with instead of the stack's ``server`` section's, such as
    ``tp_size``, ``dp_size`` through ``extra_flags``, ``ep_size``, ``mem_fraction_static`` or
    ``max_running_requests``; a flag left out is the stack's."""


class DisaggregationSpec(FileSection):
    """``fleet.disaggregation``: the fleet's hosts serve as prefill or decode workers (each host's
    ``role``), paired by SGLang's router in PD mode."""

    transfer_backend: TransferBackend = "mooncake"
    """How a decode worker pulls a prompt's KV from the prefill worker
    (``--disaggregation-transfer-backend``); the release's table decides which it accepts."""
    bootstrap_port: int = Field(default=DEFAULT_BOOTSTRAP_PORT, ge=1, le=65535)
    """The port of each prefill worker's bootstrap server (``--disaggregation-bootstrap-port``),
    where decode workers learn where its KV is; a host's own ``bootstrap_port`` wins (prefill
    hosts sharing a machine need one each)."""
    prefill: RoleSpec = Field(default_factory=RoleSpec)
    """The prefill workers' flags."""
    decode: RoleSpec = Field(default_factory=RoleSpec)
    """The decode workers' flags."""

    def role(self, role: Role) -> RoleSpec:
        """The spec of ``role``."""
        return self.prefill if role == "prefill" else self.decode

    def counted_roles(self, hosts: int) -> list[Role] | None:
        """The hosts' roles in order as the ``workers`` counts give them (prefill first); None when
        neither role counts its workers, ValueError when the counts do not cover ``hosts``."""
        if self.prefill.workers is None and self.decode.workers is None:
            return None
        prefill = (
            self.prefill.workers if self.prefill.workers is not None else hosts - (self.decode.workers or 0)
        )
        decode = self.decode.workers if self.decode.workers is not None else hosts - prefill
        if prefill < 1 or decode < 1 or prefill + decode != hosts:
            raise ValueError(
                f"fleet.disaggregation counts {prefill} prefill and {decode} decode worker(s) for "
                f"{hosts} host(s) in fleet.hosts; set prefill.workers (and decode.workers) so each role "
                "has at least one host and together they are every host"
            )
        roles: list[Role] = ["prefill"] * prefill
        return roles + ["decode"] * decode

    def flags(self, server: ServerFlags, role: Role, bootstrap_port: int | None) -> ServerFlags:
        """``server`` as a ``role`` worker launches it: the role's own flags over the stack's, then
        the role flags (a prefill worker's bootstrap port ``bootstrap_port``, else the default)."""
        own = self.role(role).server
        update: dict[str, object] = {
            name: getattr(own, name) for name in own.model_fields_set if name != "extra_flags"
        }
        update["extra_flags"] = {**server.extra_flags, **own.extra_flags}
        update["disaggregation_mode"] = role
        update["disaggregation_transfer_backend"] = self.transfer_backend
        if role == "prefill":
            update["disaggregation_bootstrap_port"] = bootstrap_port or self.bootstrap_port
        return server.model_copy(update=update)

    def role_flags(self, server: ServerFlags) -> dict[Role, ServerFlags]:
        """Each role's flags from the shared ``server`` flags (a prefill worker's default bootstrap
        port): what sets the roles apart, as `compare` shows it."""
        return {"prefill": self.flags(server, "prefill", None), "decode": self.flags(server, "decode", None)}


def declared_role_flags(server: ServerFlags) -> list[str]:
    """The role flags the stack's server section sets itself, as the sentence that refuses them."""
    declared = sorted(name for name in ROLE_FLAGS if getattr(server, name) is not None)
    if not declared:
        return []
    return [
        f"server.{declared[0]} is set in the stack file, but the role flags ({', '.join(ROLE_FLAGS)})"
        " are set per host by sglang-stacks; remove it and declare fleet.disaggregation with a role"
        " on each host of fleet.hosts"
    ]


def role_problems(
    disaggregation: DisaggregationSpec | None,
    roles: list[Role | None],
    nodes_per_replica: int,
    canary: bool,
    server: ServerFlags,
) -> list[str]:
    """What is wrong with a fleet's roles, each a sentence naming the key and the fix. ``roles``
    holds each host's ``role``; ``server`` is the stack's server section (without role flags:
    `declared_role_flags`)."""
    if disaggregation is None:
        tagged = [index for index, role in enumerate(roles) if role is not None]
        if tagged:
            return [
                f"fleet.hosts[{tagged[0]}].role is set but the fleet has no fleet.disaggregation section;"
                " add one (`disaggregation: {transfer_backend: mooncake}`) or remove the hosts' roles"
            ]
        return []
    found = []
    untagged = [index for index, role in enumerate(roles) if role is None]
    if untagged:
        found.append(
            f"fleet.hosts[{untagged[0]}] has no role, but a disaggregated fleet runs every host as a prefill"
            " or a decode worker; set its role: prefill or role: decode"
        )
    for role in ("prefill", "decode"):
        if roles and not untagged and role not in roles:
            found.append(
                f"no host of fleet.hosts has role: {role}; a disaggregated fleet needs at least one prefill "
                "and one decode worker"
            )
        own = disaggregation.role(role).server
        fixed = sorted(name for name in (*_FLEET_OWNED, *ROLE_FLAGS) if name in own.model_fields_set)
        if fixed:
            found.append(
                f"fleet.disaggregation.{role}.server.{fixed[0]} is the fleet's to set, not a role's;"
                " remove it (the model, ports and role flags are the same for every worker or set per host)"
            )
    launched = disaggregation.role_flags(server)
    found += _mismatched_kv(launched["prefill"], launched["decode"])
    found += _mismatched_tp(launched["prefill"], launched["decode"])
    if nodes_per_replica > 1:
        found.append(
            "fleet.nodes_per_replica above 1 with fleet.disaggregation: multi-node prefill or decode workers "
            "are not supported yet; set nodes_per_replica: 1"
        )
    if canary and roles and not untagged:
        for role in ("prefill", "decode"):
            count = sum(1 for given in roles if given == role)
            if 0 < count < _CANARY_WORKERS:
                found.append(
                    f"fleet.rollout.canary judges the {role} workers' first worker in a pair beside their "
                    f"second, both out of the router while a third serves, but the fleet has {count} "
                    f"{role} worker(s); give each role {_CANARY_WORKERS} hosts or more, or set "
                    "rollout.canary: false"
                )
    return found


_CANARY_WORKERS = 3
"""Workers of a role a canary needs: the canary, its reference, and one that serves meanwhile."""

# What both roles must agree on, as the decode worker checks against the prefill worker's layout
# (CommonKVReceiver, disaggregation/common/conn.py): "Both servers must use the same --page-size
# value", and from 0.5.23 the same --kv-cache-dtype.
_SHARED_KV_FLAGS = ("page_size", "kv_cache_dtype")


def _mismatched_kv(prefill_flags: ServerFlags, decode_flags: ServerFlags) -> list[str]:
    found = []
    prefill, decode = prefill_flags.extra_flags, decode_flags.extra_flags
    for name in _SHARED_KV_FLAGS:
        if prefill.get(name) != decode.get(name):
            flag = "--" + name.replace("_", "-")
            found.append(
                f"fleet.disaggregation's roles launch with different {name} (prefill {prefill.get(name)},"
                f" decode {decode.get(name)}): SGLang's decode worker refuses the prefill worker's KV"
                f' ("Both servers must use the same {flag} value"); set {name} in sglang-stacks:server,'
                " not per role"
            )
    return found


def _mismatched_tp(prefill_flags: ServerFlags, decode_flags: ServerFlags) -> list[str]:
    # SGLang maps a decode rank to prefill ranks by integer division of the two TP sizes
    # (CommonKVReceiver), and its ServerArgs states the rule: "Different tp size is supported only
    # when one tp is multiple of the other."
    prefill, decode = prefill_flags.tp_size or 1, decode_flags.tp_size or 1
    if prefill % decode == 0 or decode % prefill == 0:
        return []
    return [
        f"fleet.disaggregation's roles run tp_size {prefill} (prefill) and {decode} (decode): SGLang"
        ' supports "different tp size ... only when one tp is multiple of the other"; set the roles\''
        " tp_size so one divides the other"
    ]
