"""Whether the GPUs a server is about to use have the memory its plan counts on, checked just before
its launch. SGLang sizes its KV pool from the memory free when it starts, so another process holding
memory there (a notebook, a stray job, a server no stack tracks) takes it out of the KV cache; when
it takes all of the plan's KV cache, the server would fail only after minutes of weight loading.
The check names each holder by pid, GPU and memory, and says what would make room.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sglang_stacks.config.memory_advice import MemoryAdvice
from sglang_stacks.errors import Cause, ServerError
from sglang_stacks.hostops import probe
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.nvidia_smi import HostFacts

__all__ = ["Holder", "check_gpu_room", "holders", "room_problem", "server_gpus"]


@dataclass(frozen=True)
class Holder:
    """A process holding memory on one of the server's GPUs."""

    pid: int
    process_name: str
    gpu: int
    used_mib: int


def server_gpus(env: Mapping[str, str], gpus_per_node: int) -> list[int]:
    """The GPU indices a server launched with ``env`` uses: ``CUDA_VISIBLE_DEVICES`` when it is set,
    else the first ``gpus_per_node`` (what SGLang itself takes)."""
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        return [int(v) for v in visible.split(",") if v.strip().isdigit()][:gpus_per_node]
    return list(range(gpus_per_node))


def holders(facts: HostFacts, gpus: Sequence[int]) -> list[Holder]:
    """The processes nvidia-smi lists on ``gpus``, with the memory they hold (0 when it cannot tell)."""
    index_of = {gpu.uuid: gpu.index for gpu in facts.gpus}
    found = []
    for app in facts.compute_apps:
        gpu = index_of.get(app.gpu_uuid)
        if gpu is not None and gpu in gpus:
            found.append(Holder(app.pid, app.process_name, gpu, app.used_memory_mib or 0))
    return found


def _named(found: Sequence[Holder]) -> str:
    by_pid: dict[int, list[Holder]] = {}
    for holder in found:
        by_pid.setdefault(holder.pid, []).append(holder)
    parts = []
    for pid, held in sorted(by_pid.items()):
        gpus = ", ".join(str(h.gpu) for h in sorted(held, key=lambda h: h.gpu))
        most = max(h.used_mib for h in held)
        parts.append(f"pid {pid} ({held[0].process_name}) holds up to {most} MiB on GPU {gpus}")
    return "; ".join(parts)


def room_problem(found: Sequence[Holder], memory: MemoryAdvice | None) -> str | None:
    """Why the server cannot start beside ``found``, or None when the plan leaves it room."""
    if not found:
        return None
    per_gpu: dict[int, int] = {}
    for holder in found:
        per_gpu[holder.gpu] = per_gpu.get(holder.gpu, 0) + holder.used_mib
    held_gib = max(per_gpu.values()) / 1024
    names = _named(found)
    pids = " ".join(str(pid) for pid in sorted({h.pid for h in found}))
    stop = f"Stop {'it' if ' ' not in pids else 'them'} on the host (`kill {pids}` there)"
    if memory is None or memory.kv_cache_gb is None or memory.fraction_in_effect is None:
        return f"{names}, and the memory plan of this server was not recorded to judge it. {stop}."
    fraction, kv_gb, total_gb = memory.fraction_in_effect, memory.kv_cache_gb, memory.total_gb
    # SGLang measures the memory free at init and sizes the pool as what is free after the weights
    # minus (1 - fraction) of that: memory held by others shrinks the pool by fraction times it.
    if fraction * held_gib < kv_gb:
        return None  # SGLang starts, with a KV pool that much smaller
    plan = f"SGLang {memory.release}'s memory plan"
    why = (
        f"{names}. At mem_fraction_static {memory.setting} {plan} leaves a KV cache of {kv_gb:.2f} GB "
        f"per GPU, and SGLang sizes it from the memory free at start: {held_gib:.2f} GB held there takes "
        f"{fraction * held_gib:.2f} GB of it, leaving none, and the server would fail after loading its "
        "weights."
    )
    # The smallest fraction whose pool outgrows its share of the held memory, and the largest that
    # still leaves CUDA graphs and activations what the plan counts, of the memory left free.
    needed = math.floor((fraction * total_gb - kv_gb) / (total_gb - held_gib) * 100) / 100 + 0.01
    largest = memory.largest_fitting_fraction
    if largest is not None:
        largest = math.floor((1 - total_gb * (1 - largest) / (total_gb - held_gib)) * 100) / 100
    if largest is not None and needed <= largest:
        them = "it" if " " not in pids else "them"
        return (
            f"{why} {stop}, or raise server.mem_fraction_static from {memory.setting} to {needed:.2f} to "
            f"serve beside {them} (up to {largest:.2f} leaves room for CUDA graphs beside {them})."
        )
    return f"{why} {stop}: no mem_fraction_static the plan allows makes room beside it."


def check_gpu_room(
    conn: Connection, nvidia_smi: Sequence[str], gpus: Sequence[int], memory: MemoryAdvice | None
) -> None:
    """ServerError (``gpu_memory_held``) when processes on ``gpus`` leave the server no KV cache."""
    problem = room_problem(holders(probe.probe(conn, nvidia_smi=nvidia_smi), gpus), memory)
    if problem:
        raise ServerError(
            f"The GPUs this server would use on {conn.label} are not free; nothing was launched: {problem}",
            cause=Cause.GPU_MEMORY_HELD,
        )
