"""The emulated server's life: resolve the launch as the release does, plan its memory, boot, bind
its HTTP port and serve until stopped (``python -m sglang_emulator`` calls ``serve``)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from sglang_emulator.engine import Engine, Request
from sglang_emulator.executed import resolution_note
from sglang_emulator.fault_events import FaultEvents, crash
from sglang_emulator.faults import Faults
from sglang_emulator.http_plumbing import EmulatorHttpServer
from sglang_emulator.launch import (
    LaunchConfig,
    multinode_problem,
    parse_launch_flags,
    resolve_launch,
    world_release,
)
from sglang_emulator.memory import MemoryPlan, plan_memory, served_config
from sglang_emulator.pd_worker import role_problem, start_bootstrap
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.pool_limits import pool_limits
from sglang_emulator.profile import Profile
from sglang_emulator.rendezvous import join_group
from sglang_emulator.server import ServerContext, make_http_server
from sglang_emulator.startup import Boot, make_loggers
from sglang_emulator.startup_failures import StartupFailed
from sglang_emulator.state import StateDir, state_dir
from sglang_world.scheduling import SchedulingRules


def serve(
    argv: list[str],
    *,
    profile: Profile,
    release: str,
    scale: float,
    health_check_timeout_s: float,
    faults: Faults,
    rules: SchedulingRules,
) -> int:
    """Serve the launch ``argv`` until stopped; the exit code once the server ends."""
    note = (
        f"sglang-emulator: emulating SGLang {release} on profile {profile.name} "
        f"({profile.host.gpu_count} x {profile.host.gpu_name}); no GPU is used"
    )
    print(note, file=sys.stderr, flush=True)
    args = parse_launch_flags(release, argv)
    config = resolve_launch(release, args, profile, argv=argv)
    problem = multinode_problem(config) or role_problem(config)
    if problem:
        _say(f"sglang-emulator: error: {problem}")
        return 2
    resolved_by = resolution_note(release, config.settings, config.code_not_run, world_release(release))
    if resolved_by:
        print(f"sglang-emulator: {resolved_by}", file=sys.stderr, flush=True)
    if config.settings is not None and config.settings.refusal is not None:
        # SGLang's ServerArgs refuses the combination before anything starts.
        print(f"{config.settings.refusal_class}: {config.settings.refusal}", file=sys.stderr, flush=True)
        return 1
    log, tp0 = make_loggers(config.node_rank * config.gpus_per_node)
    state = state_dir()
    gpus = _gpu_indices(config, profile)
    used_by_others = max((state.used_mib(g, exclude_pid=os.getpid()) for g in gpus), default=0)
    used_by_others += faults.gpu_memory_held_mib
    plan = plan_memory(config, profile, used_by_others)
    config = served_config(config, plan)
    process_name = os.path.basename(sys.executable) or "python3"
    _install_exit_handlers(state)

    def record(phase: str) -> None:
        state.record(process_name, dict.fromkeys(gpus, plan.used_mib(phase)), config.port)

    record("init")
    boot = Boot(config, profile, plan, faults, scale, log, tp0, record, _group_joiner(config, state))
    try:
        boot.run_until_http()
    except StartupFailed:
        state.remove()
        return 1
    if config.node_rank > 0:
        # Only rank 0 serves HTTP; the other nodes run their ranks until the group goes down.
        threading.Event().wait()
    model = PerformanceModel(config, profile)
    engine = Engine(
        model,
        pool_limits(config, plan),
        rules,
        config.random_seed,
        tp0,
        before_prefill=_prefill_guard(plan, state),
    )
    events = FaultEvents(faults, state, engine, log)
    context = ServerContext(
        config,
        profile,
        plan,
        engine,
        faults,
        note,
        events.received,
        events.finished,
        log,
        health_check_timeout_s,
    )
    engine.handoff_inflight = lambda: context.handoff.inflight
    boot.start_http()
    server = _bind(context, state)
    if server is None:
        return 1
    bind_error = start_bootstrap(context)
    if bind_error is not None:
        _say(bind_error)
        state.remove()
        return 1
    engine.start()
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    _say(f"INFO:     Uvicorn running on http://{config.host}:{config.port} (Press CTRL+C to quit)")
    boot.warm_up(lambda: _warmup_request(engine, config.port))
    events.became_ready(context.ready.set)
    threading.Event().wait()
    return 0


def _gpu_indices(config: LaunchConfig, profile: Profile) -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    indices = list(range(profile.host.gpu_count))
    if visible is not None and visible.strip():
        indices = [
            int(v) for v in visible.split(",") if v.strip().isdigit() and int(v) < profile.host.gpu_count
        ]
    return indices[: config.gpus_per_node]


def _install_exit_handlers(state: StateDir) -> None:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        state.remove()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)


def _prefill_guard(plan: MemoryPlan, state: StateDir) -> Callable[[int], None]:
    """What a prefill forward of so many tokens does when its activations do not fit beside the
    pool, the graphs and the draft: the scheduler runs out of memory and the server goes down."""

    def before_prefill(tokens: int) -> None:
        failure = plan.prefill_failure(tokens)
        if failure is not None:
            crash(state, f"[TP0] {failure}")

    return before_prefill


def _group_joiner(config: LaunchConfig, state: StateDir) -> Callable[[], None] | None:
    """Multi-node: what joins the process group, then watches it; a node that leaves takes this
    one down, as SGLang's NCCL communicator does."""
    if config.nnodes == 1 or config.dist_init_addr is None:
        return None
    address, rank, nnodes = config.dist_init_addr, config.node_rank, config.nnodes
    first_tp = rank * config.gpus_per_node

    def on_peer_lost(peer: int) -> None:
        crash(
            state,
            f"[TP{first_tp}] Scheduler hit an exception: torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, remote process exited or there was a "
            "network error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to a network "
            f"error or a remote process exiting prematurely.\nLast error:\nsocket recv: connection closed "
            f"by node {peer} (sglang-emulator: node rank {peer} of {nnodes} left the process group)",
        )

    def join() -> None:
        group = join_group(
            address, (rank, nnodes, config.tp_size), config.dist_timeout_s or 600.0, _torch_warning
        )
        _say(f"sglang-emulator: node rank {rank} of {nnodes} joined the process group at {address}")
        group.watch(on_peer_lost)

    return join


def _torch_warning(message: str) -> None:
    _say(f"[{time.strftime('W%m%d %H:%M:%S')} socket.cpp:755] {message}")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _bind(context: ServerContext, state: StateDir) -> EmulatorHttpServer | None:
    """uvicorn's startup lines and the bound server; None, after uvicorn's error, when the port
    cannot be bound."""
    config = context.config
    _say(f"INFO:     Started server process [{os.getpid()}]")
    _say("INFO:     Waiting for application startup.")
    _say("INFO:     Application startup complete.")
    try:
        if context.faults.port_in_use:
            raise OSError(98, "address already in use")
        return make_http_server(context)
    except OSError as exc:
        _say(
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{config.host}', {config.port}): {(exc.strerror or str(exc)).lower()}"
        )
        _say("INFO:     Waiting for application shutdown.")
        _say("INFO:     Application shutdown complete.")
        state.remove()
        return None


def _warmup_request(engine: Engine, port: int) -> None:
    request = Request(rid="warmup", prompt_ids=[1, 2, 3, 4, 5, 6], max_new_tokens=8)
    engine.submit(request)
    while not request.chunks.get().finished:
        pass
    _say(f'INFO:     127.0.0.1:{port + 1000} - "POST /generate HTTP/1.1" 200 OK')
