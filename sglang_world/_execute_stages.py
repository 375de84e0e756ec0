"""Runs in the child interpreter (``_execute_pools``, ``_execute_child``): a pipeline's stages, each
sizing its own KV pool.

With ``--pp-size`` N a stage holds the layers the release's own ``get_pp_indices`` gives it (its
``SGLANG_PP_LAYER_PARTITION`` included) and sizes its pool for them; the stages then agree on the
smallest pool (an ``all_reduce`` with ``MIN`` over the pipeline), which the running limit and the
request pool follow. One process sizes each stage in turn, each with its own layers and the
question's one GPU (the plan's weights per GPU are the model's over tp x pp), its reduction over
itself returning its own pool, and keeps the smallest stage's sizes: what the reduction gives.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["smallest_stage", "stage_layers"]


def stage_layers(args: Any, count: int) -> list[tuple[int, int]]:
    """Each pipeline stage's layers ``[start, end)`` of ``count``, as the release splits them."""
    if args.pp_size == 1:
        return [(0, count)]
    split = importlib.import_module("sglang.srt.distributed.utils").get_pp_indices
    return [
        (int(start), int(end)) for start, end in (split(count, r, args.pp_size) for r in range(args.pp_size))
    ]


class _Scalar:
    """A one-element tensor as the pool code reads it back (``.item()``)."""

    def __init__(self, value: Any, **_: Any) -> None:
        self.value = value

    def item(self) -> Any:
        return self.value


@contextlib.contextmanager
def _one_process_reductions() -> Iterator[None]:
    """``torch.tensor`` and ``torch.distributed.all_reduce`` of one process: a reduction over one
    stage is its own value. Releases that reduce over the pipeline inside their sizing use them."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    saved = torch.__dict__.get("tensor"), torch.__dict__.get("distributed")
    distributed = types.SimpleNamespace(
        all_reduce=lambda *args, **kwargs: None, ReduceOp=types.SimpleNamespace(MIN="min")
    )
    setattr(torch, "tensor", _Scalar)  # noqa: B010 (a module's)
    setattr(torch, "distributed", distributed)  # noqa: B010
    try:
        yield
    finally:
        for name, value in zip(("tensor", "distributed"), saved, strict=True):
            if value is None:
                torch.__dict__.pop(name, None)
            else:
                setattr(torch, name, value)


def smallest_stage(
    args: Any, count: int, sized: Callable[[int, int], tuple[int, int, int]]
) -> tuple[int, int, int]:
    """The pool in tokens, the running limit and the request slots of the pipeline: ``sized(start,
    end)`` of each stage (the release's own sizing of a stage of those layers), the smallest pool's."""
    with _one_process_reductions():
        return min((sized(start, end) for start, end in stage_layers(args, count)), key=lambda s: s[0])
