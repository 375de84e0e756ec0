"""Runs in the child interpreter (``_execute_pools``): the KV pool of the releases that size it inside
their model runner's ``init_memory_pool``, the method that also allocates it (0.5.7 to 0.5.9).

The release's own code runs on the stand-in runner of ``_execute_pools``: ``profile_max_num_token``
gives the KV cache's budget, and ``init_memory_pool`` the pool in tokens and the request pool's
slots, stopped where it would allocate its request pool (the first pool it allocates), so that
nothing is allocated and what it sized is read off the runner.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
from collections.abc import Iterator
from typing import Any, NoReturn

_MIXIN = "sglang.srt.model_executor.model_runner_kv_cache_mixin"
_DECODE = "sglang.srt.disaggregation.decode"
_REQUEST_POOLS = {
    _MIXIN: ("ReqToTokenPool", "HybridReqToTokenPool"),
    _DECODE: ("DecodeReqToTokenPool", "HybridMambaDecodeReqToTokenPool"),
}
"""The request pool classes ``init_memory_pool`` allocates, by the module it takes them from: the
mixin's module globals, and the decode worker's, which it imports inside when it is one."""


def sizes_in_init(mixin: type) -> bool:
    """Whether the release's ``ModelRunnerKVCacheMixin`` sizes its pool inside ``init_memory_pool``
    with ``profile_max_num_token`` (0.5.7 to 0.5.9); from 0.5.10 ``_resolve_memory_pool_config``
    sizes it apart from the allocation."""
    sizing = ("profile_max_num_token", "init_memory_pool")
    return all(hasattr(mixin, name) for name in sizing) and not hasattr(mixin, "_resolve_memory_pool_config")


def budget_bytes(runner: Any, free_gib: float) -> float:
    """The KV cache's budget (bytes) of the release's ``profile_max_num_token`` at the runner's
    fraction, ``free_gib`` being what the runner measured free before loading: to 0.5.9 what
    ``init_memory_pool`` sizes the pool from, in 0.5.10 ``_resolve_memory_pool_config``.

    That function divides the budget it computes (what is free after loading less ``free_gib`` times
    ``1 - mem_fraction_static``, in bytes) by the runner's cell per token; the runner answers 1 for
    the cell during this call, so what the function returns is the budget in bytes."""
    runner.get_cell_size_per_token = lambda num_layers: 1
    try:
        return float(runner.profile_max_num_token(free_gib))
    finally:
        del runner.get_cell_size_per_token


class _Allocated(Exception):
    """Raised where the release allocates its request pool, with the slots it asked for (``size``)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"a request pool of {size} slots")
        self.size = size


def _allocation(*args: Any, size: int, **kwargs: Any) -> NoReturn:
    """The stand-in of a request pool class: it stops the release's run where it would allocate."""
    raise _Allocated(size)


@contextlib.contextmanager
def _stopped_at_allocation(decode: bool) -> Iterator[None]:
    """The release's request pool classes replaced by ``_allocation`` inside, restored after; the
    decode worker's only for a decode worker (``decode``), whose module is imported only then."""
    replaced: list[tuple[Any, str, Any]] = []
    for name, classes in _REQUEST_POOLS.items():
        if name == _DECODE and not decode:
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # the stand-ins lack it: the release's own import inside says why
            continue
        replaced += [(module, c, getattr(module, c)) for c in classes if hasattr(module, c)]
    for module, name, _ in replaced:
        setattr(module, name, _allocation)
    try:
        yield
    finally:
        for module, name, original in replaced:
            setattr(module, name, original)


def init_pool_sizes(runner: Any, free_gib: float, args: Any) -> tuple[int, int, int]:
    """The pool in tokens, the running limit and the request pool's slots of the release's
    ``init_memory_pool`` at the runner's
    fraction: its ``profile_max_num_token`` with the runner's cell, the request pool's slots (its
    estimate from the profiled tokens, or ``--max-running-requests``), ``--max-total-tokens``, page
    alignment and a hybrid model's split; what it raises where the pool holds no token ("Not enough
    memory") is raised here."""
    runner.req_to_token_pool = runner.token_to_kv_pool_allocator = None  # the target's: none yet
    runner.server_args = copy.copy(args)  # on which it notes the pool's sizes for a draft worker
    # 0.5.7 takes the arguments as a parameter as well.
    given = (
        (runner.server_args,)
        if "server_args" in inspect.signature(runner.init_memory_pool).parameters
        else ()
    )
    with _stopped_at_allocation(getattr(args, "disaggregation_mode", None) == "decode"):
        try:
            runner.init_memory_pool(free_gib, *given)
        except _Allocated as stop:
            slots = stop.size
        else:
            raise LookupError("init_memory_pool allocated no request pool the stand-ins stop at")
    tokens = int(runner.max_total_num_tokens)
    # The model runner's running limit once its pool is allocated (ModelRunner.initialize, 0.5.7 to
    # 0.5.9), which its TP worker hands the scheduler as 0.5.10 on hand it the pool config's: half the
    # pool's tokens, or --max-running-requests per attention-DP rank, within the request pool's slots.
    wanted = args.max_running_requests
    attention_dp = args.dp_size if args.enable_dp_attention else 1
    return tokens, min(tokens // 2 if wanted is None else wanted // attention_dp, slots), slots
