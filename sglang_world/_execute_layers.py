"""Runs in the child interpreter (``_execute_pools``): a model runner's layers as its release sets
them once the model is loaded, for the stand-in runner of ``_execute_pools``: its stage's full and
sliding-window attention layers, and its sliding window."""

from __future__ import annotations

import contextlib
import functools
import importlib
import types
from pathlib import Path
from typing import Any

__all__ = ["attention_layers", "keep_stage_layers", "sliding_window"]

_KINDS = ("full_attention_layer_ids", "swa_attention_layer_ids")


def attention_layers(model_config: Any) -> dict[str, list[int]]:
    """The whole model's full and sliding-window attention layers (none for a model without them)."""
    return {name: list(getattr(model_config, name, None) or ()) for name in _KINDS}


def keep_stage_layers(model_config: Any, whole: dict[str, list[int]], start: int, end: int) -> None:
    """What a loaded runner of the stage ``[start, end)`` keeps on its model config: the layers of
    ``whole`` from ``start`` to ``end`` inclusive, as the release's runner filters them (its range
    runs to ``end_layer + 1``); 0.5.7's ``profile_max_num_token`` and the hybrid pool count them."""
    for name, ids in whole.items():
        setattr(model_config, name, [layer for layer in range(start, end + 1) if layer in ids])


def sliding_window(model_config: Any) -> int | None:
    """The runner's ``sliding_window_size`` as the release's model runner sets it once its model is
    loaded: the model class's ``get_attention_sliding_window_size()`` (the class of the config's
    architecture, from the one module of the release that defines it, on the model's config), else a
    hybrid model config's sliding window, else its attention chunk."""
    architecture = (getattr(model_config.hf_config, "architectures", None) or [""])[0]
    module = _module_of(architecture)
    if module is not None:
        with contextlib.suppress(Exception):  # the stand-ins fall short of the model's module
            model = getattr(importlib.import_module(f"sglang.srt.models.{module}"), architecture)
            if hasattr(model, "get_attention_sliding_window_size"):
                config = types.SimpleNamespace(config=model_config.hf_config)
                return int(model.get_attention_sliding_window_size(config))
    if getattr(model_config, "is_hybrid_swa", False) and getattr(model_config, "sliding_window_size", None):
        return int(model_config.sliding_window_size)
    chunk = getattr(model_config, "attention_chunk_size", None)
    return int(chunk) if chunk else None


@functools.cache
def _module_of(architecture: str) -> str | None:
    """The release's model module that defines the class ``architecture`` (read once per child)."""
    models = Path(importlib.import_module("sglang.srt.models").__path__[0])
    for module in sorted(models.glob("*.py")):
        if f"class {architecture}(" in module.read_text(encoding="utf-8", errors="replace"):
            return module.stem
    return None
