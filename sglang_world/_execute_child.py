"""Runs in a fresh interpreter: one release resolves the launch commands it is asked about.

    python -S -E -O -c <bootstrap> <result.json> <release folder> [<helper folder> ...]

with ``SGLANG_WORLD_EXECUTE_QUESTIONS`` naming a JSON list of questions (``execute.Question``). The
release's own parser reads each command and its own ``ServerArgs`` resolves it, as the grid's
recording does (``_record_child``), on a stand-in machine of the question's GPUs and with the
question's model ``config.json``; the answer is what it resolved, or what it raised.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from sglang_flags import _standins
from sglang_world import _record_child as recording
from sglang_world._execute_layers import attention_layers
from sglang_world._execute_linear import linear_layers
from sglang_world._execute_pools import (
    _KV_DTYPES,
    _SINGLE_PROCESS,
    _attention_widths,
    _stand_in_element_sizes,
    budget_answer,
    mixin_pool,
    model_config_of,
    shortfall,
    unsized,
)
from sglang_world._execute_stages import smallest_stage

_QUESTIONS_VARIABLE = "SGLANG_WORLD_EXECUTE_QUESTIONS"
_REFUSALS = (ValueError, AssertionError, RuntimeError, NotImplementedError)
"""What SGLang raises to refuse a launch; other errors are the stand-ins' shortfall."""
_VERSIONED = {"torch": "torch", "transformers": "transformers", "flashinfer_python": "flashinfer"}
"""Distributions whose stand-in answers ``__version__`` with the release's own pin, by module."""
_PIN = re.compile(r"^Requires-Dist: ([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==([^;\s]+)", re.MULTILINE)


def _pins(release_dir: str) -> dict[str, str]:
    """The versions the release's wheel pins (``Requires-Dist: torch==2.9.1``), by distribution."""
    pins: dict[str, str] = {}
    for metadata in Path(release_dir).glob("sglang-*.dist-info/METADATA"):
        pins.update(_PIN.findall(metadata.read_text(encoding="utf-8")))
    return pins


def _install_versions(release_dir: str, finder: _standins.StandInFinder) -> None:
    """Stand-ins of the pinned packages report the pinned version: a release compares them
    (``packaging.version.parse(transformers.__version__)``) while it imports and resolves."""
    for distribution, version in _pins(release_dir).items():
        name = _VERSIONED.get(distribution)
        if name is not None and name in finder.served:
            setattr(importlib.import_module(name), "__version__", version)  # noqa: B010 (a module's)


def _answer(server_args: Any, parser: argparse.ArgumentParser, question: dict[str, Any]) -> dict[str, Any]:
    machine = question["machine"]
    recording.set_device(
        machine["gpu_count"], machine["gpu_name"], tuple(machine["capability"]), machine["sms"]
    )
    environ = dict(os.environ)
    os.environ.update(question["environment"])
    os.environ[recording._GPU_VARIABLE] = str(machine["gpu_mib"])
    recording._current["hf"] = recording._HfConfig(question["model_config"])
    try:
        args = recording.resolved_args(server_args, parser, list(question["argv"]))
        answered: dict[str, Any] = {"resolved": recording.settings_of(args)}
        if question["memory"] is not None:
            free_gib, loaded_gib = question["memory"]
            draft = question.get("draft_layers"), question.get("draft_weights_gib")
            answered.update(_kv_budget(args, free_gib, loaded_gib, *draft))
        return answered
    except SystemExit as error:
        return {"error": f"SystemExit: {error.code}"}
    except _REFUSALS as error:
        return {"error": refusal(error)}
    except Exception as error:  # what the stand-ins could not answer, not a refusal of the release
        return {"shortfall": shortfall(error)}
    finally:
        os.environ.clear()
        os.environ.update(environ)


def refusal(error: BaseException) -> str:
    """What the release raised, in its words; for an ``assert`` without a message, the statement and
    where it is in the release (as the server's traceback shows it)."""
    said = str(error)
    if said:
        return f"{type(error).__name__}: {said}"
    where = traceback.extract_tb(error.__traceback__)[-1]
    path = where.filename.replace("\\", "/")
    at = path[path.rfind("sglang/") :] if "sglang/" in path else Path(path).name
    return f"{type(error).__name__}: {(where.line or '').strip()} ({at}:{where.lineno})"


def _parallel_fields(context: Any) -> set[str]:
    fields = getattr(context, "_parallel_fields", None)
    return set(fields()) if callable(fields) else set()


def _kv_budget(
    args: Any, free_gib: float, loaded_gib: float, draft_layers: int | None, draft_gib: float | None
) -> dict[str, Any]:
    """What the release's own pool code leaves the KV cache once the weights are loaded
    (``kv_budget_gib``), or what it raises (``pool_error``), at the launch's fraction and at every
    fraction 0.01 to 0.99 (``kv_budget_by_step``, None where it raises).

    The code is ``KVCacheConfigurator._profile_available_bytes`` (0.5.16 on), run with the launch's
    resolved arguments published as the server publishes them, its ``ModelConfig`` built from the
    model's ``config.json``, and the GPU's free memory before loading (``free_gib``) and after
    (``loaded_gib``) as the stand-in device's measurements; with a budget, the pool it sizes from it
    (``_pool_sizes``, a draft of ``draft_layers`` inside). A release without it (0.5.15 and before)
    runs its model runner's pool code instead (``_execute_pools.mixin_pool``, a draft of
    ``draft_gib`` GiB loaded after the pool to 0.5.13)."""
    try:
        configurator = importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator")
        context = importlib.import_module("sglang.srt.runtime_context")
    except ImportError:  # 0.5.15 and before: the model runner's pool code
        return mixin_pool(args, free_gib, loaded_gib, draft_layers, draft_gib)
    profile = getattr(getattr(configurator, "KVCacheConfigurator", None), "_profile_available_bytes", None)
    if profile is None:
        return {}
    model_config = model_config_of(args, context.get_context().set_server_args)
    if isinstance(model_config, dict):
        return model_config
    if (linear := linear_layers(model_config.hf_config)) is not None:
        return {"pool_not_run": linear}
    # The device's measurement after loading, no GPU temporaries for gc to free, and a single
    # process's world group for releases that ask for it by function (module globals).
    setattr(configurator, "get_available_gpu_memory", lambda *args, **kwargs: loaded_gib)  # noqa: B010
    setattr(configurator, "gc", types.SimpleNamespace(collect=lambda: 0))  # noqa: B010
    if hasattr(configurator, "get_world_group"):
        setattr(configurator, "get_world_group", lambda: _SINGLE_PROCESS)  # noqa: B010
    runner = types.SimpleNamespace(
        device="cuda",
        gpu_id=0,
        server_args=args,
        model_config=model_config,
        mambaish_config=configurator.mambaish_config(model_config),
        post_capture_kv_active=False,
    )

    def at(fraction: float | None) -> float | str:
        if fraction is not None:  # the release's own way to change a resolved setting
            context.get_context().override(
                "sglang-stacks: the plan's fractions", mem_fraction_static=fraction
            )
        try:
            return float(profile(runner, free_gib)) / (1 << 30)
        except ValueError as error:
            return f"ValueError: {error}"

    try:
        with contextlib.ExitStack() as stack:
            parallel = getattr(context, "get_parallel", None)
            if parallel is not None and "world_group" in _parallel_fields(context):
                # A single process has no process groups: the world group it asks of its context.
                stack.enter_context(parallel().override(world_group=_SINGLE_PROCESS))
            if parallel is not None and hasattr(parallel(), "_v"):
                # Releases whose context reads attention widths off live process groups (to 0.5.18).
                stack.enter_context(parallel().override(**_attention_widths(args)))
            launched = at(None)  # as resolved and published above
            if isinstance(launched, float):
                sizes = _pool_sizes(configurator, args, model_config, int(launched * (1 << 30)), draft_layers)
            # Other fractions through the release's own override of a resolved setting, which
            # 0.5.16 does not have (its plan then tries other fractions by the project's arithmetic).
            steps = range(1, 100) if hasattr(context.get_context(), "override") else range(0)
            by_step = [at(step / 100) for step in steps]
    except Exception as error:  # the stand-ins fall short of this release's pool code
        return {"pool_not_run": f"its pool code could not be run here ({type(error).__name__}: {error})"}
    finally:
        context.get_context().set_server_args(args)
    answered = budget_answer(by_step, launched)
    if isinstance(launched, float):
        answered.update(sizes)
    return answered


def _pool_sizes(
    configurator: Any, args: Any, model_config: Any, budget: int, draft_layers: int | None
) -> dict[str, Any]:
    """The KV pool in tokens and the running-request limit the release's own pool code gives a budget
    of ``budget`` bytes (``KVCacheConfigurator.config_from_budget`` and ``resolve_max_num_reqs``):
    its per-token cell, the draft's KV in it, page alignment and ``--max-total-tokens``. For a cache
    dtype or a pipeline this does not stand in for, why not (the plan divides by its own cell)."""
    torch, reason = sys.modules.get("torch"), unsized(args)
    if torch is None or reason is not None:
        return {"pool_sizes_not_run": reason or "the release imports no torch to size its cell with"}
    dtype = _KV_DTYPES[args.kv_cache_dtype]
    model_dtype = str(model_config.hf_config.torch_dtype or "bfloat16").removeprefix("torch.")
    kv_dtype = getattr(torch, dtype or model_dtype)
    _stand_in_element_sizes(torch)
    try:
        components = "sglang.srt.model_executor.model_runner_components"
        layers = importlib.import_module(f"{components}.layer_setup")
        aux = importlib.import_module(f"{components}.spec_aux_hidden_state")
        speculative = importlib.import_module("sglang.srt.speculative.spec_info")
        attention = importlib.import_module("sglang.srt.configs.model_config").AttentionArch
        count = model_config.num_hidden_layers
        known = {
            "device": "cuda", "gpu_id": 0, "attn_dp_size": args.dp_size if args.enable_dp_attention else 1,
            "pp_size": 1, "pp_group": _SINGLE_PROCESS, "model_config": model_config, "server_args": args,
            "kv_cache_dtype": kv_dtype, "kv_cache_dtype_str": args.kv_cache_dtype,
            "model_dtype": getattr(torch, model_dtype), "page_size": args.page_size or 1,
            "spec_algorithm": speculative.SpeculativeAlgorithm.from_string(args.speculative_algorithm),
            "is_draft_worker": False, "post_capture_kv_active": False,
            "is_hybrid_swa": bool(getattr(model_config, "is_hybrid_swa", False)),
            "is_hybrid_swa_compress": False, "use_mla_backend": model_config.attention_arch == attention.MLA,
            "spec_aux_config": aux.SpecAuxHiddenStateConfig(eagle_draft_num_layers=draft_layers),
            # Releases to 0.5.20 keep the rank's parallel widths in the configurator itself.
            "ps": types.SimpleNamespace(**_attention_widths(args), pp_size=1, attn_dcp_size=1),
        }  # fmt: skip
        kind = configurator.KVCacheConfigurator
        fields = [f for f in dataclasses.fields(kind) if f.init]

        whole = attention_layers(model_config)
        adjust = getattr(layers, "adjust_hybrid_swa_layer_ids", None)  # to 0.5.20
        resolve = layers.resolve_layer_indices
        asks = [name for name in inspect.signature(resolve).parameters if name == "model" or name in known]

        def stage(start: int, end: int) -> tuple[int, int, int]:
            # The runner's layers as the release resolves them for a model holding this stage's
            # (its sliding-window and full-attention layers among them): to 0.5.20 the loaded runner
            # narrows the model config's to its stage (adjust_hybrid_swa_layer_ids), from 0.5.21
            # resolve_layer_indices slices them.
            for name, ids in whole.items():
                setattr(model_config, name, list(ids) or None)
            if adjust is not None:
                adjust(
                    model_config=model_config,
                    start_layer=start,
                    end_layer=end,
                    is_hybrid_swa=known["is_hybrid_swa"],
                )
            given = {"model": types.SimpleNamespace(start_layer=start, end_layer=end), **known}
            info = resolve(**{name: given[name] for name in asks})
            kvc = kind(**{f.name: {**known, "layer_info": info}.get(f.name) for f in fields})
            tokens = int(kind.config_from_budget(kvc, budget).max_total_num_tokens)
            running = int(kind.resolve_max_num_reqs(kvc, tokens))
            # What the configurator's request pool is built with (``_build_req_to_token_pool``).
            return tokens, running, running

        tokens, running, slots = smallest_stage(args, count, stage)
        return {"kv_tokens": tokens, "running_limit": running, "request_slots": slots}
    except Exception as error:  # the stand-ins fall short of this release's pool sizing
        return {"pool_sizes_not_run": shortfall(error)}


def answer(release_dir: str, questions: list[dict[str, Any]]) -> dict[str, Any]:
    finder = _standins.install(release_dir, protected=["sglang", "sglang_flags", "sglang_world", "msgspec"])
    recording._install_device(finder)
    if questions:  # one machine per child (``execute._ask``): what the release sees as it imports
        machine = questions[0]["machine"]
        recording.set_device(
            machine["gpu_count"], machine["gpu_name"], tuple(machine["capability"]), machine["sms"]
        )
    absent = [
        name
        for name in _VERSIONED.values()
        if name not in sys.modules and importlib.util.find_spec(name) is None
    ]
    finder.served.update(absent)
    _install_versions(release_dir, finder)
    server_args = importlib.import_module("sglang.srt.server_args")
    recording._install_model()
    parser = argparse.ArgumentParser(prog="launch_server.py")
    server_args.ServerArgs.add_cli_args(parser)
    return {"answers": [_answer(server_args, parser, question) for question in questions]}


def main(argv: list[str]) -> int:
    """Answer the questions with the release folder ``argv[1]``; write the answers to ``argv[0]``."""
    out, release_dir, helpers = argv[0], argv[1], argv[2:]
    sys.path[:0] = [release_dir, *helpers]
    with open(os.environ[_QUESTIONS_VARIABLE], encoding="utf-8") as handle:
        questions = json.load(handle)
    try:
        result = answer(release_dir, questions)
    except BaseException as error:  # the release could not be imported or set up at all
        result = {"refused": [f"{type(error).__name__}: {error}", traceback.format_exc(limit=-3)]}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0
