"""The launch command: SGLang flags parsed with the emulated release's table, then resolved.

Resolution fills what SGLang fills after parsing so the models below read one
release-independent record: the memory settings (fraction, chunk, CUDA-graph batch sizes, the
running-request limit) come from ``sglang_world``, the speculative shape from the profile.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_emulator.executed import executed_settings
from sglang_emulator.profile import Profile
from sglang_emulator.rendezvous import split_address
from sglang_emulator.world import model_facts
from sglang_flags import load_table, parser, release_key
from sglang_flags.renames import flag_for, spellings
from sglang_world import Launch, ModelKind, ServerSettings, judged_releases, resolve_settings
from sglang_world.launch import launch_from_args

__all__ = [
    "DEFAULT_RELEASE",
    "LaunchConfig",
    "multinode_problem",
    "parse_launch_flags",
    "resolve_launch",
    "world_release",
]

DEFAULT_RELEASE = "0.5.8"

# ServerArgs has kept these attribute names in every 0.5.x release; until 0.5.13 argparse parsed
# them into longer dests (tensor_parallel_size) that ServerArgs copied over.
_SERVER_ARGS_NAMES = ("tp_size", "pp_size", "dp_size", "ep_size")


def _get(raw: dict[str, Any], name: str) -> Any:
    """The parsed value of flag ``name`` under whichever spelling the release has."""
    return next((raw[dest] for dest in spellings(name) if raw.get(dest) is not None), None)


@dataclass(frozen=True)
class SpeculativeConfig:
    """EAGLE settings after SGLang's defaults are applied."""

    algorithm: str
    draft_model_path: str | None
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int

    @property
    def max_accept_length(self) -> int:
        """Tokens one verify pass can emit: the accepted drafts plus the target's own token."""
        return min(self.num_steps, self.num_draft_tokens - 1) + 1


@dataclass(frozen=True)
class LaunchConfig:
    """What the emulator needs from the launch flags, independent of the release."""

    release: str
    server_args: dict[str, Any]
    model_path: str
    served_model_name: str
    host: str
    port: int
    tp_size: int
    ep_size: int
    mem_fraction_static: float | None
    cuda_graph_max_bs: int
    cuda_graph_bs: list[int]
    cuda_graph_disabled: bool
    disable_custom_all_reduce: bool
    max_running_requests: int | None
    speculative: SpeculativeConfig | None
    random_seed: int
    enable_metrics: bool
    skip_server_warmup: bool
    flashinfer_allreduce_fusion: bool
    torch_symm_mem: bool
    flashinfer_moe: bool
    context_length: int
    chunked_prefill_size: int
    api_key: str | None
    nnodes: int = 1
    """Nodes the server spans (``--nnodes``); ``tp_size`` is the total over all of them."""
    node_rank: int = 0
    """This node's rank (``--node-rank``): rank 0 serves HTTP, the others only join the group."""
    dist_init_addr: str | None = None
    """``HOST:PORT`` where rank 0 hosts the group's rendezvous (``--dist-init-addr``)."""
    dist_timeout_s: float | None = None
    """``--dist-timeout``: how long the group may take to form."""
    disaggregation_mode: str = "null"
    """``--disaggregation-mode``: ``prefill`` or ``decode`` for a worker of a disaggregated fleet."""
    bootstrap_port: int = 8998
    page_size: int = 1
    """``--page-size``: tokens per KV page (SGLang's default 1); the roles of a disaggregated fleet
    must agree on it."""
    """``--disaggregation-bootstrap-port``: where a prefill worker's bootstrap server listens."""
    launch: Launch = field(default_factory=Launch)
    """The flags that decide memory, as ``sglang_world`` reads them."""
    settings: ServerSettings | None = None
    """What the release resolves from them (``sglang_world``): fraction, chunk, graphs, requests."""
    code_not_run: str = ""
    """Why the release's own code did not resolve the launch though the profile names its model's
    configuration (the release has no model class for it, no wheel here); empty otherwise."""

    @property
    def gpus_per_node(self) -> int:
        """Ranks on this node, one GPU each: tensor-parallel ranks of every pipeline stage, the total
        split evenly over the nodes."""
        return max(self.tp_size * self.launch.pp_size // self.nnodes, 1)


def parse_launch_flags(release: str, argv: list[str]) -> argparse.Namespace:
    """Parse like ``python -m sglang.launch_server`` of ``release``: bad flags exit 2."""
    release_parser = parser(release)
    args = release_parser.parse_args(argv)
    if args.model_path is None:
        release_parser.error("the following arguments are required: --model-path/--model")
    return args


def world_release(release: str) -> str:
    """The release whose memory rules the emulator plays ``release`` with: its own when the model
    knows them, else the newest known release before it (the oldest known one before all)."""
    judged = judged_releases()
    if release in judged:
        return release
    older = [r for r in judged if release_key(r) < release_key(release)]
    return older[-1] if older else judged[0]


def resolve_launch(
    release: str,
    args: argparse.Namespace,
    profile: Profile,
    environment: Mapping[str, str] | None = None,
    argv: list[str] | None = None,
) -> LaunchConfig:
    """Fill the values SGLang derives after parsing, as the release does on this profile's host: the
    memory settings from ``sglang_world`` (the model preflight plans with: the release's own code on
    ``argv`` when the profile names its model's configuration), the speculative shape."""
    raw = dict(vars(args))
    for name in _SERVER_ARGS_NAMES:
        raw[name] = _get(raw, name)
        for older in spellings(name)[:-1]:
            raw.pop(older, None)
    spec = _resolve_speculative(raw, profile)
    environ = os.environ if environment is None else environment
    launch = launch_from_args(raw, environ)
    if spec is not None:
        launch = dataclasses.replace(launch, speculative_num_draft_tokens=spec.num_draft_tokens)
    model = model_facts(profile, launch.tp_size * launch.pp_size)
    rules_release = world_release(release)
    kind = ModelKind(mla=model.mla, vision=model.vision)
    settings = resolve_settings(rules_release, launch, profile.host.memory_total_mib, kind)
    assert settings is not None  # world_release names a release with rules
    answer = None if argv is None else executed_settings(release, argv, launch, profile, environ)
    if answer is not None and answer.settings is not None:
        settings = answer.settings
    seed = raw.get("random_seed")
    seed = profile.random_seed if seed is None else int(seed)
    moe_a2a = str(raw.get("moe_a2a_backend") or "none")
    moe_runner = str(raw.get("moe_runner_backend") or "auto")
    context_length = raw.get("context_length") or profile.model.context_length
    resolved = LaunchConfig(
        release=release,
        server_args={},
        model_path=str(raw["model_path"]),
        served_model_name=str(raw.get("served_model_name") or raw["model_path"]),
        host=str(raw.get("host") or "127.0.0.1"),
        port=int(raw.get("port") or 30000),
        tp_size=launch.tp_size,
        ep_size=int(raw.get("ep_size") or 1),
        mem_fraction_static=settings.mem_fraction_static,
        cuda_graph_max_bs=settings.cuda_graph_max_bs or max(settings.cuda_graph_bs, default=0),
        cuda_graph_bs=list(settings.cuda_graph_bs),
        cuda_graph_disabled=settings.cuda_graph_disabled,
        disable_custom_all_reduce=bool(raw.get("disable_custom_all_reduce")),
        max_running_requests=settings.max_running_requests,
        speculative=spec,
        random_seed=seed,
        enable_metrics=bool(raw.get("enable_metrics")),
        skip_server_warmup=bool(raw.get("skip_server_warmup")),
        flashinfer_allreduce_fusion=bool(raw.get("enable_flashinfer_allreduce_fusion")),
        torch_symm_mem=bool(raw.get("enable_torch_symm_mem")),
        flashinfer_moe=moe_a2a == "flashinfer" or moe_runner.startswith("flashinfer"),
        context_length=int(context_length),
        chunked_prefill_size=settings.chunked_prefill_size,
        api_key=raw.get("api_key"),
        nnodes=int(raw.get("nnodes") or 1),
        node_rank=int(raw.get("node_rank") or 0),
        dist_init_addr=raw.get("dist_init_addr"),
        dist_timeout_s=None if raw.get("dist_timeout") is None else float(raw["dist_timeout"]),
        disaggregation_mode=str(raw.get("disaggregation_mode") or "null"),
        bootstrap_port=int(raw.get("disaggregation_bootstrap_port") or 8998),
        page_size=int(raw.get("page_size") or 1),
        launch=launch,
        settings=settings,
        code_not_run=(answer.not_run or "") if answer is not None else "",
    )
    return _with_server_args(resolved, raw)


def _with_server_args(config: LaunchConfig, raw: dict[str, Any]) -> LaunchConfig:
    view = dict(raw)
    view.update(
        tp_size=config.tp_size,
        ep_size=config.ep_size,
        random_seed=config.random_seed,
        served_model_name=config.served_model_name,
        tokenizer_path=raw.get("tokenizer_path") or config.model_path,
        context_length=config.context_length,
        chunked_prefill_size=config.chunked_prefill_size,
    )
    table = load_table(config.release)
    graphs = {"cuda_graph_max_bs": config.cuda_graph_max_bs, "cuda_graph_bs": config.cuda_graph_bs}
    for name, value in graphs.items():
        flag = flag_for(table, name)
        view[flag.dest if flag is not None else name] = value
    if config.speculative is not None:
        view.update(
            speculative_algorithm=config.speculative.algorithm,
            speculative_num_steps=config.speculative.num_steps,
            speculative_eagle_topk=config.speculative.eagle_topk,
            speculative_num_draft_tokens=config.speculative.num_draft_tokens,
        )
    view.pop("api_key", None)
    view.pop("admin_api_key", None)
    return dataclasses.replace(config, server_args=view)


def _resolve_speculative(raw: dict[str, Any], profile: Profile) -> SpeculativeConfig | None:
    algorithm = raw.get("speculative_algorithm")
    if not algorithm:
        return None
    defaults = profile.performance.speculative
    steps = raw.get("speculative_num_steps") or defaults.default_num_steps
    topk = raw.get("speculative_eagle_topk") or defaults.default_eagle_topk
    draft_tokens = raw.get("speculative_num_draft_tokens") or defaults.default_num_draft_tokens
    if topk == 1:
        draft_tokens = steps + 1
    return SpeculativeConfig(
        algorithm="EAGLE" if algorithm == "NEXTN" else str(algorithm),
        draft_model_path=raw.get("speculative_draft_model_path"),
        num_steps=int(steps),
        eagle_topk=int(topk),
        num_draft_tokens=int(draft_tokens),
    )


def multinode_problem(config: LaunchConfig) -> str | None:
    """Why a multi-node launch cannot form a group (a sentence with the fix), or None."""
    if config.nnodes == 1:
        return None
    if not 0 <= config.node_rank < config.nnodes:
        return (
            f"--node-rank {config.node_rank} is out of range for --nnodes {config.nnodes}; "
            f"use 0..{config.nnodes - 1}."
        )
    if config.tp_size % config.nnodes:
        return (
            f"--tp-size {config.tp_size} does not split evenly over --nnodes {config.nnodes}; every node "
            "runs the same number of tensor-parallel ranks. Use a multiple of the node count."
        )
    if not config.dist_init_addr:
        return (
            f"--nnodes {config.nnodes} needs --dist-init-addr HOST:PORT, the address of node rank 0 that "
            "every node joins (without it each node would wait on its own 127.0.0.1)."
        )
    try:
        split_address(config.dist_init_addr)
    except ValueError as exc:
        return f"{exc}; give rank 0's address and a free port, like 10.0.0.1:20000."
    return None
