"""Preflight: the checks that stop a knowably doomed configuration before any GPU time is spent.

Each rule reads the stack spec, the host's declared facts and the target release's flag table.
Errors stop ``pulumi preview``/``up``; warnings are shown and recorded as a stack output.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from sglang_flags import known_releases, nearest_releases
from sglang_stacks.config.execution import release_code
from sglang_stacks.config.findings import Finding, Rule, error, info, warning
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.memory_facts import stack_launch
from sglang_stacks.config.memory_text import explain, fraction_fix, verdict_line
from sglang_stacks.config.multinode import SOCKET_IFNAME_VARIABLES
from sglang_stacks.config.render import flag_problems, resolve_flag
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.config.speculative import speculative
from sglang_stacks.errors import FlagError, PreflightError
from sglang_world.pool_code import pool_approximation

__all__ = ["Finding", "raise_on_errors", "run_preflight", "stack_findings"]


def _release(spec: StackSpec, release: str) -> Iterable[Finding]:
    if release != spec.environment.sglang_release:
        yield warning(
            "release-mismatch",
            "environment.sglang_release",
            f"The stack pins SGLang {spec.environment.sglang_release} but the flags are checked "
            f"for {release}, the release on the host.",
            "Pin the release the host runs, or reinstall the pinned one.",
        )


def _flags(spec: StackSpec, release: str) -> Iterable[Finding]:
    flags = spec.launch_flags()
    for problem in flag_problems(flags, release):
        yield replace(problem, key=f"server.{problem.key}")
    used = [key for key, value in flags.typed_values().items() if value is not False]
    for key in [*used, *flags.extra_flags]:
        try:
            flag = resolve_flag(key, release)
        except FlagError:  # reported above as flag-unrenderable
            continue
        if flag.action.startswith("Deprecated"):
            yield warning(
                "flag-deprecated",
                f"server.{key}",
                f"{flag.long_name} is deprecated in SGLang {release}.",
                "Move to its replacement before a release drops it.",
            )


def _gpus(spec: StackSpec, release: str) -> Iterable[Finding]:
    tp, gpus, nodes = spec.tp_size, spec.host.gpu_count, spec.server.nnodes or 1
    launch = stack_launch(spec, release)
    pp = launch.pp_size if launch is not None else 1
    ranks = f"tp_size {tp}" if pp == 1 else f"tp_size {tp} x pp_size {pp}"
    per_node = tp * pp // nodes  # a multi-node server runs tp x pp / nodes ranks on each host
    if nodes > 1:
        needs, whose = f"{ranks} over {nodes} nodes needs {per_node} GPUs per node", "each host's"
        bigger = f"more hosts (fleet.nodes_per_replica), or hosts with {per_node} GPUs"
    else:
        needs, whose = f"{ranks} needs {per_node} GPUs", "the host's"
        bigger = f"a host with {per_node} GPUs"
    if per_node > gpus:
        yield error(
            "tp-exceeds-gpus",
            "server.tp_size",
            f"{needs} but the host declares {gpus}.",
            f"Set tp_size to at most {gpus * nodes // pp}, or use {bigger}.",
        )
    elif per_node < gpus:
        yield info("gpus-idle", "server.tp_size", f"{ranks} uses {per_node} of {whose} {gpus} GPUs.")
    ep = spec.server.ep_size
    if ep is not None and (ep > tp or tp % ep):
        yield error(
            "ep-size",
            "server.ep_size",
            f"ep_size {ep} must divide tp_size {tp}: experts are spread over the tensor-parallel ranks.",
            f"Set ep_size to a divisor of {tp} (1 or {tp} are usual).",
        )


def _memory(spec: StackSpec, release: str) -> Iterable[Finding]:
    plan = plan_memory(spec, release)
    key = "server.mem_fraction_static"
    approximated = pool_approximation(release) if plan.tokens_from is None else None
    if approximated and plan.pool_from is not None:
        approximated = (
            f"The KV cache's budget is {plan.pool_from}'s; its size in tokens divides that budget by the "
            f"plan's per-token cell (the target's KV and a draft's), which SGLang {release} computes in code "
            "the plan does not run."
        )
    if approximated and plan.tokens_not_run is not None:
        approximated = f"{approximated} It was not run here: {plan.tokens_not_run}."
    if approximated and plan.max_total_num_tokens is not None:
        yield warning(
            "kv-pool-approximated",
            "environment.sglang_release",
            approximated,
            "Before relying on the plan's token count, read the pool SGLang reports at start "
            "(`KV Cache is allocated. #tokens` in `sglang-stacks logs <stack>`).",
        )
    if plan.verdict == "does_not_fit":
        if plan.failure_phase == "launch":
            return  # the release refuses the flags themselves; the speculative rules say which
        yield error("memory-does-not-fit", key, verdict_line(plan), fraction_fix(plan))
    elif plan.verdict == "unknown" and plan.flags_rendered:  # else flag-unrenderable says why
        yield warning(
            "memory-unjudged",
            key,
            verdict_line(plan),
            "The plan cannot stop this configuration before launch; it is kept and the server's own "
            "start decides.",
        )
    else:
        yield info("memory-plan", key, " ".join(explain(plan)))


def _sm120(spec: StackSpec, release: str) -> Iterable[Finding]:
    if spec.host.sm_major != 12:
        return
    where = f"{spec.host.gpu_model} (compute capability {spec.host.compute_capability}, SM120)"
    if spec.server.enable_flashinfer_allreduce_fusion:
        yield error(
            "sm120-flashinfer-allreduce-fusion",
            "server.enable_flashinfer_allreduce_fusion",
            f"FlashInfer all-reduce fusion fails on {where}: its JIT does not support SM120.",
            "Remove enable_flashinfer_allreduce_fusion.",
        )
    if spec.server.enable_torch_symm_mem:
        yield error(
            "sm120-torch-symm-mem",
            "server.enable_torch_symm_mem",
            f"Torch symmetric memory fails on {where}: SM120 is not in its architecture table.",
            "Remove enable_torch_symm_mem.",
        )


def _cuda_graphs_enabled(spec: StackSpec) -> bool:
    extras = spec.server.extra_flags
    disabled_by_extras = extras.get("cuda_graph_backend_decode") == "disabled" or any(
        extras.get(k) is True for k in ("disable_decode_cuda_graph", "--disable-decode-cuda-graph")
    )
    return not (spec.server.disable_cuda_graph or disabled_by_extras)


def _nccl_tree(spec: StackSpec, release: str) -> Iterable[Finding]:
    algo = spec.environment.env.get("NCCL_ALGO")
    if algo is None or algo.startswith("^") or not _cuda_graphs_enabled(spec):
        return
    chosen = {a.strip().lower() for a in algo.split(",") if a.strip()}
    if "tree" not in chosen:
        return
    message = f"NCCL_ALGO={algo} selects the Tree algorithm, which is incompatible with CUDA graphs."
    fix = "Remove NCCL_ALGO (or set Ring), or run without CUDA graphs (disable_cuda_graph)."
    if chosen == {"tree"}:
        yield error("nccl-tree-cuda-graphs", "environment.env.NCCL_ALGO", message, fix)
    else:
        yield warning(
            "nccl-tree-cuda-graphs", "environment.env.NCCL_ALGO", message + " NCCL may pick it.", fix
        )


def _node_network(spec: StackSpec, release: str) -> Iterable[Finding]:
    nodes = spec.server.nnodes or 1
    if nodes == 1:
        return
    named = [name for name in SOCKET_IFNAME_VARIABLES if name in spec.environment.env]
    if len(named) < len(SOCKET_IFNAME_VARIABLES):
        unset = [n for n in SOCKET_IFNAME_VARIABLES if n not in named]
        missing = " and ".join(unset) + (" are" if len(unset) > 1 else " is")
        yield warning(
            "multinode-socket-ifname",
            "fleet.socket_ifname",
            f"This server spans {nodes} nodes and {missing} unset: NCCL and Gloo then pick an "
            "interface themselves, which may be one the other nodes cannot reach (a container bridge, "
            "a management network), and the group never forms.",
            "Set fleet.socket_ifname to the interface of the network the nodes share (`ip -br addr` "
            "on a host lists them).",
        )
    yield info(
        "multinode-init-address",
        "fleet.dist_init_port",
        f"Node rank {spec.server.node_rank} of {nodes} joins the rendezvous at {spec.server.dist_init_addr}; "
        "the other nodes' reach of it is checked from each host before the GPUs are claimed.",
    )


def _custom_all_reduce(spec: StackSpec, release: str) -> Iterable[Finding]:
    if spec.host.interconnect != "pcie" or spec.tp_size < 2 or spec.server.disable_custom_all_reduce:
        return
    yield warning(
        "pcie-custom-all-reduce",
        "server.disable_custom_all_reduce",
        f"SGLang's custom all-reduce kernel runs over PCIe across {spec.tp_size} GPUs; on this host it "
        f"was measured at 38 tok/s against 82 tok/s with NCCL, more than 2x slower.",
        "Set disable_custom_all_reduce: true.",
    )


def _expert_parallel(spec: StackSpec, release: str) -> Iterable[Finding]:
    if spec.server.moe_a2a_backend != "flashinfer":
        return
    yield error(
        "ep-flashinfer-a2a",
        "server.moe_a2a_backend",
        "Expert parallelism with the flashinfer all-to-all backend fails on this setup: an assertion "
        "(expert_location_metadata is None), then out of memory; its buffers cut per-GPU free memory "
        "from 21.7 GB to 16.3 GB.",
        "Leave moe_a2a_backend unset (or none) and keep expert parallelism off.",
    )


def _workload(spec: StackSpec, release: str) -> Iterable[Finding]:
    peak = max(spec.benchmark.concurrency)
    limit = spec.server.max_running_requests
    if limit is not None and peak > limit:
        yield warning(
            "benchmark-over-running-limit",
            "benchmark.concurrency",
            f"The benchmark runs {peak} streams but max_running_requests is {limit}; the rest queue.",
            f"Lower the concurrency to {limit} or raise max_running_requests.",
        )
    graph_bs = spec.server.cuda_graph_max_bs
    if graph_bs is not None and _cuda_graphs_enabled(spec) and peak > graph_bs:
        yield warning(
            "benchmark-over-graph-bs",
            "benchmark.concurrency",
            f"The benchmark runs {peak} streams but CUDA graphs are captured up to batch {graph_bs}; "
            f"larger batches run without graphs.",
            f"Raise cuda_graph_max_bs to {peak}, or lower the concurrency.",
        )


_RULES: tuple[Rule, ...] = (
    _release,
    _flags,
    release_code,
    _gpus,
    _memory,
    _sm120,
    _nccl_tree,
    _node_network,
    _custom_all_reduce,
    _expert_parallel,
    speculative,
    _workload,
)


def run_preflight(spec: StackSpec, release: str) -> list[Finding]:
    """Every finding for ``spec`` launched with SGLang ``release``: errors first, then warnings, infos."""
    if release not in known_releases():
        return [
            error(
                "release-unknown",
                "environment.sglang_release",
                f"There is no flag table for SGLang {release}, so nothing can be checked.",
                f"Use the nearest release with one ({' or '.join(nearest_releases(release))}), or add a "
                f"table with python -m sglang_flags.regenerate {release}.",
            )
        ]
    return _by_severity(finding for rule in _RULES for finding in rule(spec, release))


def stack_findings(spec: StackSpec) -> list[Finding]:
    """Every finding for the stack's server, or for each server of a fleet on hosts: a finding of
    a disaggregated fleet's worker names its role (``decode workers: ...``), and each is said once
    however many servers it holds for."""
    if spec.fleet is None or not spec.fleet.hosts:
        return run_preflight(spec, spec.environment.sglang_release)
    found: dict[tuple[str, str, str], Finding] = {}
    roles = spec.fleet.roles()
    for index in range(len(spec.fleet.hosts)):
        host = spec.for_host(index)
        for finding in run_preflight(host, host.environment.sglang_release):
            said = f"{roles[index]} workers: {finding.message}" if roles[index] else finding.message
            found.setdefault((finding.severity, finding.code, said), replace(finding, message=said))
    return _by_severity(found.values())


def _by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """``findings`` errors first, then warnings, then infos, each kind in the order found."""
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order[f.severity])


def raise_on_errors(findings: Iterable[Finding]) -> None:
    """Raise PreflightError listing every error finding; do nothing when there is none."""
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        lines = "\n".join(f"  - {f.key}: {f.message} {f.fix}" for f in errors)
        raise PreflightError(f"Preflight found {len(errors)} error(s); nothing was launched:\n{lines}")
