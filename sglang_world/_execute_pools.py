"""Runs in the child interpreter (``_execute_child``): the KV pool of the releases that size it in
their model runner's ``ModelRunnerKVCacheMixin`` (0.5.7 to 0.5.15), on a stand-in runner.

The stand-in is a class of the release's own mixin with the attributes a model runner of one rank
has for the launch, so what sizes the pool is the release's code: ``_profile_available_bytes`` (the
KV cache's budget, 0.5.11 on; to 0.5.10 what ``profile_max_num_token`` computes, ``_execute_init_pool``)
and ``_resolve_memory_pool_config`` (the pool in tokens and the running limit, 0.5.10 on); to 0.5.9
``init_memory_pool`` (``_execute_init_pool``).
Here too are the stand-ins this code and ``KVCacheConfigurator`` (0.5.16 on, run by
``_execute_child``) share: a single process's world group, the rank's attention widths, the cache
dtypes' element sizes.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_flags import _standins
from sglang_world._execute_init_pool import budget_bytes, init_pool_sizes, sizes_in_init
from sglang_world._execute_layers import attention_layers, keep_stage_layers, sliding_window
from sglang_world._execute_linear import linear_layers
from sglang_world._execute_stages import smallest_stage

_MIXIN = "sglang.srt.model_executor.model_runner_kv_cache_mixin"
_CONFIGURATOR = "sglang.srt.model_executor.pool_configurator"
_POOL_REFUSALS = (ValueError, RuntimeError)
"""What the pool code raises when the memory leaves the KV cache nothing ("Not enough memory")."""
_SINGLE_PROCESS = types.SimpleNamespace(world_size=1, cpu_group=None)
"""The world group of a server that runs in one process, as the pool code reads it."""
_KV_DTYPES = {"auto": None, "bf16": "bfloat16", "bfloat16": "bfloat16", "fp8_e4m3": "float8_e4m3fn",
              "fp8_e5m2": "float8_e5m2"}  # fmt: skip
"""torch's dtype of each ``--kv-cache-dtype`` whose pool this code sizes (``auto``: the model's)."""
_ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1}


def _attention_widths(args: Any) -> dict[str, int]:
    """The attention-parallel widths of one rank of the launch, as its process groups would give them."""
    dp = args.dp_size if args.enable_dp_attention else 1
    return {"attn_tp_size": args.tp_size // dp, "attn_tp_rank": 0, "attn_dp_size": dp, "attn_dp_rank": 0}


def _stand_in_element_sizes(torch: Any) -> None:
    """torch's ``_utils._element_size`` of the stand-in dtypes (``torch.bfloat16``: 2 bytes), which
    the pool code multiplies its cell by; the stand-in torch's other answers stay stand-ins."""
    utils = _standins._StandInModule("torch._utils")

    def element_size(dtype: Any) -> int:
        return _ELEMENT_BYTES[str(dtype).rsplit(".", 1)[-1]]

    utils._element_size = element_size  # type: ignore[attr-defined]
    sys.modules["torch._utils"] = utils
    torch._utils = utils


def unsized(args: Any) -> str | None:
    """Why the stand-ins cannot size this launch's pool in tokens, or None when they can."""
    if _KV_DTYPES.get(args.kv_cache_dtype, "") == "":
        return f"the stand-in torch has no element size for --kv-cache-dtype {args.kv_cache_dtype}"
    return None


def shortfall(error: BaseException) -> str:
    """Where and how the stand-ins fell short of what the release's code asked of them."""
    where = traceback.extract_tb(error.__traceback__)[-1]
    at = f"{Path(where.filename).name}:{where.lineno}"
    return f"the stand-ins fell short at {at} ({type(error).__name__}: {error})"


def model_config_of(args: Any, publish: Callable[[Any], None] | None = None) -> Any:
    """The release's ``ModelConfig`` of the resolved launch, the arguments first published as the
    server publishes them (``publish``, for releases that read them from their context), or why it
    could not be built here (a ``pool_not_run`` answer)."""
    module = importlib.import_module("sglang.srt.configs.model_config")
    try:
        if publish is not None:
            publish(args)
        return module.ModelConfig.from_server_args(args)
    except Exception as error:  # the stand-ins fall short of this release's model config
        return {"pool_not_run": f"its model config could not be built here ({type(error).__name__}: {error})"}


def budget_answer(by_step: list[float | str], launched: float | str) -> dict[str, Any]:
    """The answer of budgets the release's pool code gave (GiB) or refused (its words): at each
    fraction tried (``kv_budget_by_step``, None where it refused) and at the launch's (``kv_budget_gib``
    or ``pool_error``)."""
    answered: dict[str, Any] = {"kv_budget_by_step": [b if isinstance(b, float) else None for b in by_step]}
    answered["kv_budget_gib" if isinstance(launched, float) else "pool_error"] = launched
    return answered


def _runner_class(mixin: type) -> type:
    """A model runner class of the release's own ``ModelRunnerKVCacheMixin``: its pool methods, on
    the attributes given to each instance."""

    class Runner(mixin):  # type: ignore[misc]
        """One rank's model runner as the release's pool code reads it, which notes whether that
        code asks for the draft's KV layers (``eagle_draft_num_layers``)."""

        draft_asked = False

        def __init__(self, **attributes: Any) -> None:
            self.__dict__.update(attributes)

        @property
        def eagle_draft_num_layers(self) -> int | None:
            self.draft_asked = True
            return self.__dict__["draft_layers"]  # type: ignore[no-any-return]

    return Runner


def _counts_the_draft(runner: Any) -> bool:
    """Whether the release's pool configurator charges a draft's KV to the target's pool (it asks
    the runner for the draft's layers, 0.5.14 on): the draft model is then loaded before the pool
    is sized. Before, the target's pool is sized first, and the draft's weights and KV follow it."""
    factory = getattr(sys.modules.get(_CONFIGURATOR), "create_memory_pool_configurator", None)
    if factory is None:  # 0.5.10 sizes the pool with profile_max_num_token, the target's layers alone
        return False
    factory(runner)
    return bool(runner.draft_asked)


def mixin_pool(
    args: Any, free_gib: float, loaded_gib: float, draft_layers: int | None, draft_gib: float | None
) -> dict[str, Any]:
    """What the release's ``ModelRunnerKVCacheMixin`` sizes for the launch: the KV cache's budget at
    the launch's fraction (``kv_budget_gib``) or what it raises (``pool_error``), the budget at every
    fraction 0.01 to 0.99 (``kv_budget_by_step``), and the pool in tokens with its running limit
    (``kv_tokens``, ``running_limit``). ``loaded_gib`` is free once the target's weights and a
    draft's (``draft_gib``, None without one) are loaded: a release that sizes the target's pool
    before loading the draft measures the draft's weights as free (``draft_after_pool``, to 0.5.13).
    With ``--pp-size`` each stage's pool is sized and the smallest kept (``_execute_stages``).
    Nothing for a release without that mixin's pool sizing (0.5.6 and before); for a cache dtype the
    stand-ins do not stand in for, or when they fall short, why the pool in tokens was not sized
    (``pool_sizes_not_run``)."""
    try:
        mixin = importlib.import_module(_MIXIN).ModelRunnerKVCacheMixin
    except (ImportError, AttributeError):
        return {}
    with contextlib.suppress(ImportError):  # 0.5.11 on
        importlib.import_module(_CONFIGURATOR)
    sized, in_init = unsized(args) is None, sizes_in_init(mixin)  # in_init: 0.5.7 to 0.5.9
    if not (in_init or hasattr(mixin, "_resolve_memory_pool_config")):
        return {}
    model_config = model_config_of(args)
    if isinstance(model_config, dict):
        return model_config
    if (linear := linear_layers(model_config.hf_config)) is not None:
        return {"pool_not_run": linear}
    measured = {"gib": loaded_gib}
    answered: dict[str, Any] = {}
    whole = attention_layers(model_config)
    keep_stage_layers(model_config, whole, 0, model_config.num_hidden_layers)
    try:
        _stand_in_functions(args, measured)
        runner = _runner(mixin, args, model_config, draft_layers)
        if draft_gib is not None and not _counts_the_draft(runner):
            measured["gib"] = loaded_gib + draft_gib  # not loaded yet when the target's pool is sized
            answered["draft_after_pool"] = True
        # The budget: 0.5.11 on _profile_available_bytes; to 0.5.10 profile_max_num_token's.
        profile = getattr(type(runner), "_profile_available_bytes", budget_bytes)
        answered.update(_budgets(runner, free_gib, args.mem_fraction_static, profile))
    except Exception as error:  # the stand-ins fall short of this release's pool code
        return {"pool_not_run": f"its pool code could not be run here ({type(error).__name__}: {error})"}
    if not sized:
        answered["pool_sizes_not_run"] = unsized(args)
    elif "pool_error" not in answered:

        def stage(start: int, end: int) -> tuple[int, int, int]:
            runner.start_layer, runner.end_layer, runner.num_effective_layers = start, end, end - start
            keep_stage_layers(model_config, whole, start, end)
            return init_pool_sizes(runner, free_gib, args) if in_init else _resolved(runner, free_gib)

        sizes = _sizes(lambda: smallest_stage(args, model_config.num_hidden_layers, stage))
        if "pool_error" in sizes:  # the budget holds no token: the release's refusal, not a budget
            answered.pop("kv_budget_gib", None)
        answered.update(sizes)
    return answered


def _stand_in_functions(args: Any, measured: dict[str, float]) -> None:
    """The device's measurement (``measured``), one process's world group and the rank's attention
    width, which the pool code asks functions for (module globals); the dtypes' element sizes."""
    widths = _attention_widths(args)
    module = sys.modules[_MIXIN]
    setattr(module, "get_available_gpu_memory", lambda *args, **kwargs: measured["gib"])  # noqa: B010
    setattr(module, "get_world_group", lambda: _SINGLE_PROCESS)  # noqa: B010
    for name in (_MIXIN, _CONFIGURATOR):
        if hasattr(sys.modules.get(name), "get_attention_tp_size"):
            setattr(sys.modules[name], "get_attention_tp_size", lambda: widths["attn_tp_size"])  # noqa: B010
    _stand_in_element_sizes(sys.modules["torch"])


def _runner(mixin: type, args: Any, model_config: Any, draft_layers: int | None) -> Any:
    """One rank's model runner of the launch, as a runner sets its attributes from the resolved
    arguments and the model's config: one pipeline stage, the attention-DP width, the cache dtype
    (the model's for one the stand-ins lack, whose cell is then not sized)."""
    torch = sys.modules["torch"]
    model_dtype = str(model_config.hf_config.torch_dtype or "bfloat16").removeprefix("torch.")
    attention = importlib.import_module("sglang.srt.configs.model_config").AttentionArch
    algorithm = importlib.import_module("sglang.srt.speculative.spec_info").SpeculativeAlgorithm
    count = model_config.num_hidden_layers
    return _runner_class(mixin)(
        device="cuda", gpu_id=0, server_args=args, model_config=model_config,
        mem_fraction_static=args.mem_fraction_static, page_size=args.page_size or 1,
        # A config.json read by the stand-ins is none of the hybrid linear-attention config classes
        # the runner's own check looks for (isinstance), so that check answers None.
        mambaish_config=None, is_hybrid_swa=bool(getattr(model_config, "is_hybrid_swa", False)),
        is_hybrid_swa_compress=False, enable_hisparse=False,
        sliding_window_size=sliding_window(model_config),
        spec_algorithm=algorithm.from_string(args.speculative_algorithm), is_draft_worker=False,
        draft_layers=draft_layers, dflash_draft_num_layers=None, start_layer=0, end_layer=count,
        num_effective_layers=count, use_mla_backend=model_config.attention_arch == attention.MLA,
        kv_cache_dtype=getattr(torch, _KV_DTYPES.get(args.kv_cache_dtype) or model_dtype),
        dtype=getattr(torch, model_dtype), pp_size=1, dp_size=_attention_widths(args)["attn_dp_size"],
    )  # fmt: skip


def _budgets(
    runner: Any, free_gib: float, launched: float, profile: Callable[[Any, float], float]
) -> dict[str, Any]:
    """The release's budget in bytes (``profile``: ``_profile_available_bytes``, to 0.5.10 what its
    ``profile_max_num_token`` computes; ``free_gib`` is GiB, as the runner measures it before loading)
    at each fraction 0.01 to 0.99 and at the launch's, in GiB; where it raises (0.5.14 on: "Loaded
    weights leave no GPU memory ..."), None and the launch's ``pool_error``."""

    def at(fraction: float) -> float | str:
        runner.mem_fraction_static = fraction
        try:
            return float(profile(runner, free_gib)) / (1 << 30)
        except ValueError as error:
            return f"ValueError: {error}"

    by_step = [at(step / 100) for step in range(1, 100)]
    budget = at(launched)  # last, so the runner sizes its pool at the launch's fraction
    return budget_answer(by_step, budget)


def _resolved(runner: Any, free_gib: float) -> tuple[int, int, int]:
    """The pool in tokens, the running limit and the request pool's slots of the release's
    ``_resolve_memory_pool_config`` (its cell, a draft's layers in it from 0.5.14, page alignment,
    ``--max-total-tokens``): the model runner's ``max_total_num_tokens`` and ``max_running_requests``,
    which its TP worker hands the scheduler and which, from 0.5.10, its ``init_memory_pool`` also
    sizes the request pool by."""
    config = runner._resolve_memory_pool_config(free_gib)
    running = int(config.max_running_requests)
    return int(config.max_total_num_tokens), running, running


def _sizes(resolve: Callable[[], tuple[int, int, int]]) -> dict[str, Any]:
    """The pool in tokens, the running limit and the request pool's slots the release's pool sizing
    gives (``resolve``: ``_resolved``, or to 0.5.9 ``init_memory_pool``'s), or what it raises where
    the budget holds no token ("Not enough memory")."""
    try:
        tokens, running, slots = resolve()
    except NotImplementedError as error:  # a stand-in's, not a refusal
        return {"pool_sizes_not_run": shortfall(error)}
    except _POOL_REFUSALS as error:
        return {"pool_error": f"{type(error).__name__}: {error}"}
    except Exception as error:  # the stand-ins fall short of this release's pool sizing
        return {"pool_sizes_not_run": shortfall(error)}
    return {"kv_tokens": tokens, "running_limit": running, "request_slots": slots}
