"""What to change after a server failed, by cause: each fix names the setting and a value other than
the one already set, read from `FailureContext` (the server's settings and the memory plan of its
SGLang release), or says that no value would do and why. The causes are read from the server's log
(`recognise`); `hostops.server_failure` puts class, log lines and fix together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sglang_stacks.config.memory_advice import MemoryAdvice

__all__ = ["FailureContext", "LogCause", "became_ready", "fix_for", "recognise", "stopped_while"]

LogCause = Literal[
    "bad_flag",
    "nccl_peer",
    "nccl_rendezvous",
    "nccl_algo",
    "nccl_abort",
    "nccl",
    "unsupported_gpu",
    "oom_kv_cache",
    "oom_cuda_graph",
    "oom_weights",
    "oom",
    "illegal_memory_access",
    "python_missing",
    "port_in_use",
]
"""A cause a server's log makes recognisable, finer than the `errors.Cause` users see of it
(`server_failure` maps each): each has its own fix."""

_RENDER_HINT = "`sglang-stacks render <stack>`"

# Checked in order. SGLang wraps every error during CUDA-graph capture in "Capture cuda graph
# failed", so the specific causes come before the out-of-memory ones that phrase belongs to, and a
# multi-node cause before the generic NCCL one.
_PATTERNS: tuple[tuple[re.Pattern[str], LogCause], ...] = (
    (re.compile(r"error: (unrecognized arguments|ambiguous option|argument [^:]+: invalid)"), "bad_flag"),
    (re.compile(r"ncclRemoteError|left the process group"), "nccl_peer"),
    (re.compile(r"DistNetworkError|DistStoreError"), "nccl_rendezvous"),
    (re.compile(r"NCCL_ALGO=\S*[Tt]ree"), "nccl_algo"),
    (re.compile(r"NCCL communicator was aborted|ncclCommAbort|Watchdog caught collective"), "nccl_abort"),
    (re.compile(r"NCCL (error|WARN)|ncclInternalError|ncclSystemError|ncclInvalidUsage"), "nccl"),
    (
        re.compile(r"FlashInfer JIT failed|torch symmetric memory|not supported on (this GPU|SM)"),
        "unsupported_gpu",
    ),
    (re.compile(r"Not enough memory"), "oom_kv_cache"),
    (re.compile(r"Capture cuda graph failed"), "oom_cuda_graph"),
    (re.compile(r"CUDA out of memory|OutOfMemoryError"), "oom"),
    (re.compile(r"illegal memory access"), "illegal_memory_access"),
    # nohup's and env's words when the program to run is missing.
    (re.compile(r"failed to run command|^env: .*No such file or directory", re.MULTILINE), "python_missing"),
    (re.compile(r"[Aa]ddress already in use"), "port_in_use"),
)
# Where a start stopped, from the last of SGLang's phase lines its log shows.
_PHASES = (
    ("The server is fired up and ready to roll", "serving"),
    ("Uvicorn running on", "warming up (its HTTP server answered, the warmup request did not finish)"),
    ("Capture cuda graph end", "after capturing its CUDA graphs"),
    ("Capture cuda graph begin", "capturing CUDA graphs"),
    ("KV Cache is allocated", "after allocating its KV cache"),
    ("Load weight end", "allocating its KV cache"),
    ("Load weight begin", "loading the weights"),
)
_LOADING_WEIGHTS = _PHASES[-1][1]


@dataclass(frozen=True)
class FailureContext:
    """What a fix reads of the failed server's settings, so that it names a value other than the
    one already set."""

    stack: str = "<stack>"
    """The stack, for the commands the fix names."""
    port: int | None = None
    """``server.port``."""
    ready_timeout_s: float | None = None
    """``launch.ready_timeout_s``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """``environment.env``: NCCL's settings among them."""
    memory: MemoryAdvice | None = None
    """The memory plan of the stack's SGLang release; None when it was not recorded."""


def recognise(log_text: str) -> LogCause | None:
    """The cause the server's log names, or None when it names none this tool knows."""
    cause = next((cause for pattern, cause in _PATTERNS if pattern.search(log_text)), None)
    if cause == "oom" and stopped_while(log_text) == _LOADING_WEIGHTS:
        return "oom_weights"
    return cause


def became_ready(log_text: str) -> bool:
    """Whether the log says the server became ready (SGLang's last startup line)."""
    return _PHASES[0][0] in log_text


def stopped_while(log_text: str) -> str:
    """What a start was doing when it stopped, from the last phase line of its log."""
    found = [(log_text.rfind(line), doing) for line, doing in _PHASES if line in log_text]
    return max(found)[1] if found else "starting, before it loaded the weights"


def fix_for(cause: LogCause | None, log_text: str, context: FailureContext) -> str:
    """The fix of a failure of ``cause`` (None: the log names no known cause)."""
    if cause is None:
        return f"Its last log lines above say why; fix that, then run `pulumi up -s {context.stack}` again."
    if cause.startswith("oom"):
        return _memory_fix(cause, context, log_text)
    if cause.startswith("nccl"):
        return _nccl_fix(cause, context)
    return _OTHER_FIXES[cause](context)


def _more_gpus(memory: MemoryAdvice) -> str:
    doubled = memory.tp_size * 2
    if memory.gpu_count is not None and doubled > memory.gpu_count:
        # Preflight refuses a tp_size above the host's GPUs: the fix is another host, not a flag.
        return (
            f"split the model over more GPUs than this host's {memory.gpu_count} (tp_size {doubled} "
            "needs a host, or a multi-node fleet, with that many)"
        )
    return f"raise server.tp_size from {memory.tp_size} to {doubled} (less of the model per GPU)"


_REPORTED_FRACTION = re.compile(r"\bmem_fraction_static=([0-9]*\.[0-9]+)")


def _as_the_server_reported(memory: MemoryAdvice, log_text: str) -> MemoryAdvice:
    """``memory`` with the fraction the server itself reported using (its ``server_args`` line), where
    the stack left the fraction to SGLang: the server's word over the plan's count of it."""
    reported = _REPORTED_FRACTION.findall(log_text)
    if memory.mem_fraction_static is not None or not reported:
        return memory
    return memory.model_copy(update={"fraction_in_effect": float(reported[-1])})


def _halved_bs(memory: MemoryAdvice) -> str:
    bs = memory.cuda_graph_max_bs
    if bs <= 1:
        return "set server.disable_cuda_graph: true"
    return f"lower server.cuda_graph_max_bs from {bs} to {max(1, bs // 2)}"


def _memory_fix(cause: LogCause, context: FailureContext, log_text: str) -> str:
    memory = context.memory
    if memory is None:
        what = "Raise" if cause == "oom_kv_cache" else "Lower"
        return (
            f"{what} server.mem_fraction_static (run {_RENDER_HINT}: its memory plan gives the fractions "
            "that fit), or lower server.cuda_graph_max_bs."
        )
    memory = _as_the_server_reported(memory, log_text)
    plan = f"SGLang {memory.release}'s memory plan"
    smallest, largest = memory.smallest_fitting_fraction, memory.largest_fitting_fraction
    setting, current, more_gpus = memory.setting, memory.fraction_in_effect, _more_gpus(memory)
    if cause == "oom_weights":
        return (
            f"The weights ({memory.weights_gb:.2f} GB per GPU) did not fit in what the GPU had free: "
            f"another process holds GPU memory (`nvidia-smi` on the host names it; stop it), or {more_gpus}."
        )
    if smallest is None or largest is None:
        return (
            f"No mem_fraction_static fits: {plan} needs the static pool to hold {memory.weights_gb:.2f} "
            f"GB of weights and a KV cache of the {memory.total_gb:.2f} GB GPU, and CUDA graphs and "
            f"activations {memory.rest_needed_gb:.2f} GB outside it. {_halved_bs(memory).capitalize()}, "
            f"or {more_gpus}."
        )
    # A fraction outside the plan's fitting range is the first thing to change, whatever ran out:
    # preflight refuses it, and any other change would leave it there.
    if current is None or current < smallest:
        return (
            f"Raise server.mem_fraction_static from {setting} to {smallest:.2f}, the smallest fraction "
            f"{plan} gives room for the KV cache at (up to {largest:.2f} leaves room for CUDA graphs)."
        )
    if current > largest:
        return (
            f"Lower server.mem_fraction_static from {setting} to {largest:.2f}, the largest fraction "
            f"{plan} leaves room for CUDA graphs and activations at, or {_halved_bs(memory)}."
        )
    if cause == "oom_cuda_graph" or (cause == "oom" and current <= smallest):
        return (
            f"{_halved_bs(memory).capitalize()}: at mem_fraction_static {setting} {plan} leaves room for "
            "the graphs and activations, but the GPU had less free than it counts (another process may "
            "hold some: `nvidia-smi` on the host)."
        )
    if cause == "oom":
        # Out of memory outside the static pool (activations, a workspace): a smaller pool leaves more.
        lower = max(smallest, round(current - 0.05, 2))
        return (
            f"Lower server.mem_fraction_static from {setting} to {lower:.2f} ({plan} counts {smallest:.2f} "
            f"as the smallest fraction that fits), or {_halved_bs(memory)}."
        )
    # The plan counted enough at this fraction, and the server found less free (other processes, a
    # larger runtime than counted): halfway to the largest fraction leaves room on both sides.
    target = max(round((current + largest) / 2, 2), round(current + 0.01, 2))
    if target > largest:
        return (
            f"No larger mem_fraction_static fits: {plan} puts the fractions that fit between "
            f"{smallest:.2f} and {largest:.2f}, and at {setting} the GPU had less free than it counts. "
            f"Free GPU memory (`nvidia-smi` on the host), {_halved_bs(memory)}, or {more_gpus}."
        )
    return (
        f"Raise server.mem_fraction_static from {setting} to {target:.2f}: {plan} counts {smallest:.2f} as "
        f"the smallest fraction that fits and {largest:.2f} as the largest, but the server found less "
        "memory free than the plan counts (another process on the GPUs, or a larger runtime), so a "
        "fraction between them leaves room on both sides."
    )


def _nccl_fix(cause: LogCause, context: FailureContext) -> str:
    if cause == "nccl_peer":
        return (
            "Another node of this multi-node server failed or lost the network: read its log on its host "
            "(it names the cause), fix that and run `pulumi up` again; the group is relaunched together."
        )
    if cause == "nccl_rendezvous":
        return (
            "The nodes of this multi-node server did not meet at the init address: check that every node "
            "reaches rank 0's fleet.hosts[i].node_address on fleet.dist_init_port, that "
            "fleet.socket_ifname names their shared network, and that every node was launched."
        )
    algo = context.env.get("NCCL_ALGO")
    if cause == "nccl_algo" or (algo and "tree" in algo.lower()):
        return (
            f"Remove NCCL_ALGO={algo or 'Tree'} from environment.env (or set it to Ring): NCCL's Tree "
            "algorithm cannot be captured in a CUDA graph."
        )
    debug = context.env.get("NCCL_DEBUG", "")
    if debug.upper() in ("INFO", "TRACE"):
        see = f"NCCL_DEBUG is {debug} already: the NCCL lines above the error name the rank and the operation"
    else:
        was = f" (now {debug})" if debug else ""
        see = (
            f"Set NCCL_DEBUG=INFO in environment.env{was} and run `pulumi up -s {context.stack}` again: "
            "NCCL then logs which rank and operation failed"
        )
    if cause == "nccl_abort":
        return (
            "A collective timed out or another GPU's process failed first, and NCCL aborted the "
            f"communicator. {see}."
        )
    return f"NCCL failed. {see}; on PCIe hosts keep server.disable_custom_all_reduce: true."


def _port_fix(context: FailureContext) -> str:
    port = context.port
    if port is None:
        return (
            "Another process holds the server's port on the host. Stop it, or set server.port to a free port."
        )
    return (
        f"Another process holds port {port} on the host (`ss -ltnp 'sport = :{port}'` there names it). "
        f"Stop it, or set server.port to a port other than {port} that is free."
    )


_OTHER_FIXES = {
    "bad_flag": lambda context: (
        "The SGLang release on the host rejects a launch flag. Run "
        "`sglang-stacks render <stack> --release <host release>` to see the argv, and set "
        "environment.sglang_release to the release the host really has."
    ),
    "unsupported_gpu": lambda context: (
        "A kernel this flag selects does not support the host's GPU architecture. Remove the flag "
        f"(preflight knows the SM120 cases: {_RENDER_HINT})."
    ),
    "illegal_memory_access": lambda context: (
        "A CUDA kernel read memory it does not own. Set CUDA_LAUNCH_BLOCKING=1 in environment.env so "
        "the log names the kernel, or set server.disable_cuda_graph: true to learn whether a captured "
        f"graph causes it; then run `pulumi up -s {context.stack}` again."
    ),
    "python_missing": lambda context: (
        "The server's Python is not on the host any more. Run `pulumi refresh` so that the Python "
        "environment is seen gone, then `pulumi up` installs it again."
    ),
    "port_in_use": _port_fix,
}
