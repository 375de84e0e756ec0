"""The failures SGLang's startup is known to hit on this hardware: what ``Boot`` checks before each
phase goes on, the traceback SGLang prints, and ``StartupFailed``."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sglang_emulator.launch import LaunchConfig
from sglang_emulator.memory import MemoryPlan
from sglang_emulator.profile import Profile
from sglang_world import GRAPH_CAPTURE_HINTS, Phase

__all__ = ["StartupFailed", "StartupFailures"]

# Architectures the software supports, as facts about the software, not the host.
_FLASHINFER_ALLREDUCE_FUSION_ARCHS = ("9.0", "10.0")
_TORCH_SYMM_MEM_ARCHS = ("9.0", "10.0")


class StartupFailed(Exception):
    """Startup stopped the way SGLang's would; the log already says why."""


def _traceback(log: logging.Logger, frames: list[tuple[str, str]], error: str) -> None:
    lines = ["Scheduler hit an exception: Traceback (most recent call last):"]
    for where, code in frames:
        lines += [f"  {where}", f"    {code}"]
    lines.append(error)
    log.error("\n".join(lines))


class StartupFailures:
    """``Boot``'s checks and failures; ``Boot`` holds the fields they read."""

    config: LaunchConfig
    profile: Profile
    plan: MemoryPlan
    log: logging.Logger
    tp0: logging.Logger
    environ: Mapping[str, str]

    def _fail_if_planned(self, phase: Phase, frames: list[tuple[str, str]]) -> None:
        """Fails here when the memory plan says the server runs out of memory in ``phase``."""
        failure = self.plan.failure
        if failure is not None and failure.phase == phase:
            self._fail(frames, failure.message)

    def _fail(self, frames: list[tuple[str, str]], error: str) -> None:
        _traceback(self.tp0, frames, error)
        self.log.error("Received sigquit from a child process. It usually means the child failed.")
        raise StartupFailed(error)

    def _check_devices(self) -> None:
        """Fails when the host has too few GPUs, or torch symmetric memory is asked for on an architecture
        without it."""
        config, host = self.config, self.profile.host
        if config.gpus_per_node > host.gpu_count:
            per_node = (
                f" over {config.nnodes} nodes: {config.gpus_per_node} per node" if config.nnodes > 1 else ""
            )
            pp = config.launch.pp_size
            pipeline = f" x pp_size={pp}" if pp > 1 else ""
            self._fail(
                [
                    (
                        'File "sglang/srt/model_executor/model_runner.py", in init_torch_distributed',
                        "torch.get_device_module(self.device).set_device(self.gpu_id)",
                    )
                ],
                f"torch.AcceleratorError: CUDA error: invalid device ordinal (tp_size={config.tp_size}"
                f"{pipeline}{per_node}, but this host has {host.gpu_count} GPUs)",
            )
        if config.torch_symm_mem and host.compute_capability not in _TORCH_SYMM_MEM_ARCHS:
            self._fail(
                [
                    (
                        'File "sglang/srt/distributed/device_communicators/torch_symm_mem.py", in __init__',
                        "max_size = TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability]",
                    )
                ],
                f"KeyError: '{host.compute_capability}' (torch symmetric memory: SM"
                f"{host.compute_capability.replace('.', '')} is not in its architecture table; supported: "
                f"{', '.join(_TORCH_SYMM_MEM_ARCHS)})",
            )

    def _fail_expert_parallel(self, avail_gib: float) -> None:
        workspace = self.profile.memory.ep_a2a_workspace_gib
        _traceback(
            self.tp0,
            [
                (
                    'File "sglang/srt/layers/moe/token_dispatcher/flashinfer.py", in __init__',
                    "assert expert_location_metadata is not None",
                )
            ],
            "AssertionError: expert_location_metadata is None",
        )
        self._fail(
            [
                (
                    'File "sglang/srt/model_executor/model_runner.py", in init_memory_pool',
                    "self.token_to_kv_pool = ...",
                )
            ],
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {avail_gib:.2f} GiB. GPU 0 has "
            f"a total capacity of {self.plan.total_gib:.2f} GiB of which {avail_gib - workspace:.2f} GiB "
            "is free.",
        )

    def _check_graph_capture(self) -> None:
        """Fails when NCCL or FlashInfer cannot be captured in a CUDA graph on this host."""
        config, host = self.config, self.profile.host
        nccl_algo = self.environ.get("NCCL_ALGO", "")
        if config.tp_size > 1 and "tree" in nccl_algo.lower():
            self._graph_failed(
                "NCCL error in: all_reduce, invalid usage (run with NCCL_DEBUG=WARN for details)\n"
                f"ncclInvalidUsage: NCCL_ALGO={nccl_algo} cannot be captured in a CUDA graph: the Tree "
                "algorithm is incompatible with CUDA graph capture of all-reduce"
            )
        sm = host.compute_capability
        unsupported_fusion = sm not in _FLASHINFER_ALLREDUCE_FUSION_ARCHS
        if config.flashinfer_allreduce_fusion and config.tp_size > 1 and unsupported_fusion:
            self._graph_failed(
                "RuntimeError: FlashInfer JIT failed to build trtllm_allreduce_fusion: compute capability "
                f"{sm} (sm_{sm.replace('.', '')}) is not supported; supported: "
                f"{', '.join(_FLASHINFER_ALLREDUCE_FUSION_ARCHS)}"
            )

    def _graph_failed(self, error: str) -> None:
        self._fail(
            [('File "sglang/srt/model_executor/cuda_graph_runner.py", in __init__', "self.capture()")],
            f"Exception: Capture cuda graph failed: {error}\n{GRAPH_CAPTURE_HINTS}",
        )

    def _check_draft_model(self) -> None:
        """Fails when speculative decoding needs a draft model and was given none."""
        spec = self.config.speculative
        assert spec is not None
        if not spec.draft_model_path:
            self._fail(
                [
                    (
                        'File "sglang/srt/speculative/eagle_worker.py", in __init__',
                        "self.draft_model_runner = ...",
                    )
                ],
                f"ValueError: --speculative-draft-model-path is required for {spec.algorithm} with this "
                "model (it has no built-in draft layers).",
            )
