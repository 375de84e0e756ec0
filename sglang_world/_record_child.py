"""Runs in a fresh interpreter: one release resolves its own memory settings at every grid point.

    python -S -E -O -c <bootstrap> <result.json> <release folder> [<helper folder> ...]

The release's own code runs: its parser reads a launch command, its ``ServerArgs`` resolves it
(``__post_init__``, or ``resolve_once`` from 0.5.19), and its CUDA-graph runner picks the batch
sizes it captures. Around it stand a device and a model: ``torch.cuda`` answers as a GPU does, an
``nvidia-smi`` answers with the grid point's memory (what the release's
``get_device_memory_capacity`` reads), and the model's ``config.json`` comes from the grid's stand-in
models. Everything else missing (kernels, transformers) is an inert stand-in, as for the flag tables.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import subprocess
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Any

from sglang_flags import _inert, _standins
from sglang_world.grid import GRID, STAND_IN_MODELS, GridPoint, argv_of

_GPU_VARIABLE = "SGLANG_WORLD_STAND_IN_GPU_MIB"
_POINTS_VARIABLE = "SGLANG_WORLD_RECORD_POINTS"


@dataclass
class _Machine:
    """The stand-in machine: the grid's is eight H100s; a judged stack's is its host (``set_device``)."""

    count: int = 8
    name: str = "NVIDIA H100 80GB HBM3"
    capability: tuple[int, int] = (9, 0)
    sms: int = 132


_DEVICE = _Machine()
_RUNNER_REQUESTS = 4096
"""The request pool the stand-in graph runner reports: SGLang's largest, so no size is cut."""
_HF_LOADERS = ("get_config",)
_HF_MODULES = (
    "sglang.srt.utils.hf_transformers_utils",
    "sglang.srt.utils.hf_transformers.config",
    "sglang.srt.hf_transformers_utils",
    "sglang.srt.configs.model_config",
)


class _HfConfig:
    """A ``config.json`` as transformers' ``PretrainedConfig`` presents it: keys are attributes,
    a missing key raises ``AttributeError``, nested ``*_config`` objects are configs too."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._keys = list(values)
        for key, value in values.items():
            # transformers keeps quantization_config a dict; the other *_config keys are configs.
            nested = isinstance(value, dict) and key.endswith("_config") and key != "quantization_config"
            object.__setattr__(self, key, _HfConfig(value) if nested else value)

    def to_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self._keys}

    def get_text_config(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, "text_config", self)

    def __contains__(self, key: object) -> bool:
        return key in self._keys


class _Device(types.ModuleType):
    """``torch.cuda`` of ``_DEVICE``, its GPUs of the point's memory; anything else
    it is asked is an inert stand-in, except what only a vendor's plugin adds (``torch.version.musa``)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _inert.PLUGIN_ATTRIBUTES:
            raise AttributeError(name)
        return _inert.Inert(f"{self.__name__}.{name}")


def _gpu_bytes() -> int:
    return int(os.environ[_GPU_VARIABLE]) * 1024 * 1024


class _Properties:
    """What ``torch.cuda.get_device_properties`` answers: a GPU of the stand-in machine."""

    def __init__(self) -> None:
        self.name, self.multi_processor_count, self.total_memory = _DEVICE.name, _DEVICE.sms, _gpu_bytes()
        self.major, self.minor = _DEVICE.capability


def set_device(count: int, name: str, capability: tuple[int, int], sms: int) -> None:
    """The stand-in machine the next resolutions see."""
    _DEVICE.count, _DEVICE.name, _DEVICE.capability, _DEVICE.sms = count, name, capability, sms


def _install_device(finder: _standins.StandInFinder) -> None:
    torch = _standins._StandInModule("torch")
    cuda, version = _Device("torch.cuda"), _Device("torch.version")
    answers: dict[types.ModuleType, dict[str, Any]] = {
        torch: {"__path__": [], "cuda": cuda, "version": version, "__version__": "2.9.1"},
        cuda: {
            "__path__": [],
            "is_available": lambda: True,
            "device_count": lambda: _DEVICE.count,
            "current_device": lambda: 0,
            "get_device_capability": lambda *args: _DEVICE.capability,
            "get_device_name": lambda *args: _DEVICE.name,
            "get_device_properties": lambda *args: _Properties(),
            "mem_get_info": lambda *args: (_gpu_bytes(), _gpu_bytes()),
        },
        version: {"cuda": "12.9", "hip": None},
    }
    for module, attributes in answers.items():
        for name, value in attributes.items():
            setattr(module, name, value)
    sys.modules.update({"torch": torch, "torch.cuda": cuda, "torch.version": version})
    finder.served.add("torch")
    subprocess.run = _nvidia_smi(subprocess.run)


def _nvidia_smi(run: Any) -> Any:
    """``subprocess.run`` with the device's ``nvidia-smi`` in it: the release reads the GPU's memory
    as ``--query-gpu=memory.total``, one line per GPU; any other nvidia-smi query finds no tool."""

    def device_run(command: Any, *args: Any, **kwargs: Any) -> Any:
        words = [str(word) for word in command] if isinstance(command, list | tuple) else str(command).split()
        if not words or os.path.basename(words[0]) != "nvidia-smi":
            return run(command, *args, **kwargs)
        if not any(word.startswith("--query-gpu=memory.total") for word in words):
            raise FileNotFoundError(2, "No such file or directory", "nvidia-smi")
        lines = "".join(f"{os.environ[_GPU_VARIABLE]}\n" for _ in range(_DEVICE.count))
        text = kwargs.get("text") or kwargs.get("universal_newlines") or kwargs.get("encoding")
        return subprocess.CompletedProcess(words, 0, lines if text else lines.encode(), "" if text else b"")

    return device_run


_current: dict[str, _HfConfig] = {}


def _install_model() -> None:
    """Every loader of a model's config.json answers with the current stand-in model's."""
    for name in _HF_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    for name, module in list(sys.modules.items()):
        if not name.startswith("sglang.") or module is None:
            continue
        for loader in _HF_LOADERS:
            if hasattr(module, loader):
                setattr(module, loader, lambda *args, **kwargs: _current["hf"])


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "__struct_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__struct_fields__}
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    return value


def _graph_settings(resolved: dict[str, Any]) -> tuple[Any, Any, bool]:
    """The decode CUDA graph's max batch size, batch sizes and whether it is off."""
    config = _plain(resolved.get("cuda_graph_config"))
    if isinstance(config, dict) and isinstance(config.get("decode"), dict):
        decode = config["decode"]
        return decode.get("max_bs"), decode.get("bs"), str(decode.get("backend")) == "disabled"
    disabled = bool(resolved.get("disable_cuda_graph"))
    return resolved.get("cuda_graph_max_bs"), resolved.get("cuda_graph_bs"), disabled


class _Runner:
    """What the release's CUDA-graph runner reads of its model runner when it picks batch sizes."""

    def __init__(self, args: Any) -> None:
        self.server_args = args
        self.req_to_token_pool = types.SimpleNamespace(size=_RUNNER_REQUESTS)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _inert.Inert(f"ModelRunner().{name}")


def _runtime_sizes(args: Any) -> list[int] | None:
    """Releases that leave the batch sizes to the graph runner (0.5.1, 0.5.2): what it captures."""
    runner = importlib.import_module("sglang.srt.model_executor.cuda_graph_runner")
    # The attention group the process group would have formed: tp / dp GPUs per DP rank.
    dp_attention = importlib.import_module("sglang.srt.layers.dp_attention")
    dp = args.dp_size if args.enable_dp_attention else 1
    setattr(dp_attention, "_ATTN_TP_SIZE", args.tp_size // dp)  # noqa: B010 (a module global)
    sizes = runner.get_batch_sizes_to_capture(_Runner(args))
    return list(sizes[0] if isinstance(sizes, tuple) else sizes)


def resolved_args(server_args: Any, parser: argparse.ArgumentParser, argv: list[str]) -> Any:
    """The release's ``ServerArgs`` for ``argv``, resolved as its launch resolves them."""
    # One parser serves every point; its default values must not carry one point's edits to the next.
    parsed = argparse.Namespace(**copy.deepcopy(vars(parser.parse_args(argv))))
    args = server_args.ServerArgs.from_cli_args(parsed)
    if hasattr(args, "resolve_once"):
        args.resolve_once()
    return args


def _resolve(server_args: Any, parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    return settings_of(resolved_args(server_args, parser, argv))


def settings_of(args: Any) -> dict[str, Any]:
    """The memory settings of resolved ``ServerArgs`` (``recorded_store.ROW_FIELDS``)."""
    resolved = args.resolved_dict() if hasattr(args, "resolved_dict") else dict(vars(args))
    max_bs, bs, disabled = _graph_settings(resolved)
    runtime = _runtime_sizes(args) if bs is None and not disabled else None
    return {
        "mem_fraction_static": resolved.get("mem_fraction_static"),
        "chunked_prefill_size": resolved.get("chunked_prefill_size"),
        "max_prefill_tokens": resolved.get("max_prefill_tokens"),
        "max_running_requests": resolved.get("max_running_requests"),
        "cuda_graph_max_bs": max_bs,
        "cuda_graph_bs": list(bs) if bs is not None else None,
        "cuda_graph_disabled": disabled,
        "runtime_cuda_graph_bs": runtime,
    }


def _run_point(server_args: Any, parser: argparse.ArgumentParser, point: GridPoint) -> dict[str, Any]:
    environ = dict(os.environ)
    os.environ[_GPU_VARIABLE] = str(point.gpu_mib)
    model = next(m for m in STAND_IN_MODELS if m.name == point.model)
    _current["hf"] = _HfConfig(model.hf_config)
    try:
        options = {option for action in parser._actions for option in action.option_strings}
        return _resolve(server_args, parser, argv_of(point, options))
    except SystemExit as error:
        return {"error": f"SystemExit: {error.code}"}
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    finally:
        os.environ.clear()
        os.environ.update(environ)


def _points() -> list[GridPoint]:
    """The grid, or the points ``SGLANG_WORLD_RECORD_POINTS`` numbers (a quick re-recording)."""
    chosen = os.environ.get(_POINTS_VARIABLE)
    if not chosen:
        return list(GRID)
    return [GRID[int(index)] for index in chosen.split(",")]


def record(release_dir: str) -> dict[str, Any]:
    """Every grid point (or the chosen ones) resolved by the release in ``release_dir``."""
    finder = _standins.install(release_dir, protected=["sglang", "sglang_flags", "sglang_world", "msgspec"])
    _install_device(finder)
    server_args = importlib.import_module("sglang.srt.server_args")
    _install_model()
    parser = argparse.ArgumentParser(prog="launch_server.py")
    server_args.ServerArgs.add_cli_args(parser)
    asked = _inert.questions()
    rows = [_run_point(server_args, parser, point) for point in _points()]
    places = sorted({question.rsplit(" at ", 1)[-1] for question in asked})
    return {"rows": rows, "stand_in_modules": sorted(finder.served), "stand_in_questions_at": places}


def main(argv: list[str]) -> int:
    """Resolve the grid with the release folder ``argv[1]``; write the result to ``argv[0]``."""
    out, release_dir, helpers = argv[0], argv[1], argv[2:]
    sys.path[:0] = [release_dir, *helpers]
    try:
        result = record(release_dir)
    except BaseException as error:  # the release could not be imported or set up at all
        result = {"refused": [f"{type(error).__name__}: {error}", traceback.format_exc(limit=-3)]}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0
