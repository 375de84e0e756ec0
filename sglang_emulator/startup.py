"""SGLang's startup, phase by phase, with its log lines.

Each phase sleeps for the profile's duration times ``$SGLANG_EMULATOR_TIME_SCALE`` and records
the GPU memory reached so far. A known failure (``startup_failures``) prints what SGLang prints and
raises ``StartupFailed``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sglang_emulator.faults import Faults
from sglang_emulator.launch import LaunchConfig
from sglang_emulator.memory import MemoryPlan
from sglang_emulator.profile import Profile
from sglang_emulator.rendezvous import GroupError
from sglang_emulator.startup_failures import StartupFailures

__all__ = ["Boot", "make_loggers"]


def make_loggers(first_tp_rank: int = 0) -> tuple[logging.Logger, logging.Logger]:
    """SGLang's two line formats: ``[time] msg`` for the server, ``[time TP0] msg`` for the node's
    first tensor-parallel rank (``TP8`` on the second node of tp 16)."""
    loggers = []
    for name, suffix in (("sglang_emulator.server", ""), ("sglang_emulator.tp0", f" TP{first_tp_rank}")):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"[%(asctime)s{suffix}] %(message)s", "%Y-%m-%d %H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        loggers.append(logger)
    return loggers[0], loggers[1]


@dataclass
class Boot(StartupFailures):
    """One startup run; ``record(phase)`` stores GPU memory for the ``nvidia-smi`` shim."""

    config: LaunchConfig
    profile: Profile
    plan: MemoryPlan
    faults: Faults
    time_scale: float
    log: logging.Logger
    tp0: logging.Logger
    record: Callable[[str], None]
    join_group: Callable[[], None] | None = None
    """Multi-node: joins the process group at the init address (blocks until all nodes did);
    raises GroupError when it cannot."""
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    """The server process's environment (``NCCL_ALGO`` and the like): its own when served, the
    candidate's when a benchmark works a launch out in another process."""

    def _wait(self, seconds: float) -> None:
        time.sleep(seconds * self.time_scale)

    def _hang_if(self, phase: str) -> None:
        if self.faults.hang_at_phase == phase:
            self.log.info("sglang-emulator: injected fault: hanging during startup phase %r.", phase)
            threading.Event().wait()

    def run_until_http(self) -> None:
        """From process start to the line before uvicorn starts."""
        self._announce_plan()
        self._init_distributed()
        avail = self._load_weights()
        if self.config.flashinfer_moe and self.config.ep_size > 1:
            self._fail_expert_parallel(avail)
        self._allocate_kv_cache()
        self._capture_graphs()
        if self.config.speculative is not None:
            self._start_draft()
        self.record("ready")
        self._report_ready()

    def _announce_plan(self) -> None:
        plan = self.plan
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.config.server_args.items()))
        self.log.info("server_args=ServerArgs(%s)", args)
        self.log.info(
            "sglang-emulator: memory plan per GPU (SGLang %s's %s): static pool %.3f x %.2f GB free "
            "after the runtime (%.2f GB) and the driver's reserve and other processes (%.2f GB) = %.2f GB: "
            "weights %.2f GB, KV pool %.2f GB (%d tokens); draft %.2f GB",
            self.config.release
            if self.config.settings and self.config.settings.executed
            else plan.world.release,
            "own code" if self.config.settings and self.config.settings.executed else "rules",
            plan.mem_fraction_static,
            plan.avail_before_load_gib,
            plan.runtime_overhead_gib,
            plan.others_gib,
            plan.mem_fraction_static * plan.avail_before_load_gib,
            plan.weights_gib,
            plan.kv_pool_gib,
            plan.max_total_num_tokens,
            plan.draft_weights_gib,
        )

    def _init_distributed(self) -> None:
        plan, startup = self.plan, self.profile.startup
        self._wait(startup.process_start_s)
        self.tp0.info("Init torch distributed begin.")
        self._hang_if("init")
        self._check_devices()
        if self.join_group is not None:
            self._join()
        self._wait(startup.init_distributed_s)
        self.tp0.info("Init torch distributed ends. mem usage=%.2f GB", plan.runtime_overhead_gib)

    def _join(self) -> None:
        assert self.join_group is not None
        try:
            self.join_group()
        except GroupError as error:
            self._fail(
                [
                    (
                        'File "sglang/srt/distributed/parallel_state.py", in init_distributed_environment',
                        "torch.distributed.init_process_group(...)",
                    )
                ],
                str(error),
            )

    def _load_weights(self) -> float:
        """Loads the weights; the GPU memory still free after them."""
        plan, startup = self.plan, self.profile.startup
        avail = plan.avail_before_load_gib
        self.tp0.info("Load weight begin. avail mem=%.2f GB", avail)
        self._hang_if("weights")
        self._wait(plan.weights_gib / startup.weight_load_gib_per_s)
        self._fail_if_planned(
            "load",
            [('File "sglang/srt/model_loader/loader.py", in load_model', "model = _initialize_model(...)")],
        )
        self.record("weights")
        self.tp0.info(
            "Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB.",
            self.profile.model.architecture,
            avail - plan.weights_gib,
            plan.weights_gib,
        )
        return avail - plan.weights_gib

    def _allocate_kv_cache(self) -> None:
        plan, startup = self.plan, self.profile.startup
        self._hang_if("kv_cache")
        self._wait(startup.kv_cache_alloc_s)
        self._fail_if_planned(
            "kv_pool",
            [
                (
                    'File "sglang/srt/model_executor/model_runner.py", in init_memory_pool',
                    "raise RuntimeError(",
                )
            ],
        )
        self.record("kv")
        self.tp0.info(
            "KV Cache is allocated. #tokens: %d, KV size: %.2f GB",
            plan.max_total_num_tokens,
            plan.kv_pool_gib,
        )
        self.tp0.info("Memory pool end. avail mem=%.2f GB", plan.avail_after_pool_gib)

    def _report_ready(self) -> None:
        config, plan = self.config, self.plan
        settings = plan.world.settings
        assert settings is not None
        self.tp0.info(
            "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
            "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB",
            plan.max_total_num_tokens,
            settings.chunked_prefill_size,
            settings.max_prefill_tokens,
            plan.max_running_requests,
            config.context_length,
            plan.avail_at_serve_gib,
        )

    def _capture_graphs(self) -> None:
        config, plan = self.config, self.plan
        if config.cuda_graph_disabled:
            return
        avail = plan.avail_after_pool_gib
        self.tp0.info(
            "Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB", avail
        )
        self.tp0.info("Capture cuda graph bs %s", plan.captured_batch_sizes)
        self._hang_if("cuda_graph")
        self._check_graph_capture()
        self._fail_if_planned(
            "graphs",
            [('File "sglang/srt/model_executor/cuda_graph_runner.py", in __init__', "self.capture()")],
        )
        seconds = len(plan.captured_batch_sizes) * self.profile.startup.cuda_graph_s_per_graph
        self._wait(seconds)
        self.record("graphs")
        self.tp0.info(
            "Capture cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB.",
            seconds,
            plan.cuda_graph_gib,
            avail - plan.cuda_graph_gib,
        )

    def _start_draft(self) -> None:
        plan, startup = self.plan, self.profile.startup
        self._check_draft_model()
        avail = plan.avail_after_graphs_gib
        self.tp0.info("Load weight begin. avail mem=%.2f GB", avail)
        self._wait(startup.draft_load_s)
        self._fail_if_planned(
            "draft",
            [('File "sglang/srt/speculative/eagle_worker.py", in __init__', "self.draft_model_runner = ...")],
        )
        avail -= plan.draft_weights_gib + plan.draft_kv_gib
        self.tp0.info(
            "Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=%.2f GB, "
            "mem usage=%.2f GB.",
            avail,
            plan.draft_weights_gib,
        )
        if self.config.cuda_graph_disabled:
            return
        graphs = len(plan.captured_batch_sizes)
        seconds = graphs * startup.draft_cuda_graph_s_per_graph
        for kind in ("draft", "draft extend"):
            self.tp0.info(
                "Capture %s cuda graph begin. This can take up to several minutes. avail mem=%.2f GB",
                kind,
                avail,
            )
            self._wait(seconds / 2)
            self.tp0.info(
                "Capture %s cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB.",
                kind,
                seconds / 2,
                plan.draft_cuda_graph_gib / 2,
                avail - plan.draft_cuda_graph_gib / 2,
            )
            avail -= plan.draft_cuda_graph_gib / 2

    def start_http(self) -> None:
        """The tokenizer manager and the HTTP app come up before uvicorn binds."""
        self._wait(self.profile.startup.http_start_s)

    def warm_up(self, run_warmup_request: Callable[[], None]) -> None:
        """After uvicorn is up: the warmup request, any injected slowness, then ready."""
        self._hang_if("warmup")
        if not self.config.skip_server_warmup:
            self._wait(self.profile.startup.warmup_s)
            run_warmup_request()
        if self.faults.slow_readiness_s:
            time.sleep(self.faults.slow_readiness_s)
        self.log.info("The server is fired up and ready to roll!")
