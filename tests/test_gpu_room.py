"""The check before a launch of memory other processes hold on the server's GPUs, on a real H200's
`nvidia-smi` capture (pid 427, python3, 19,592 MiB on GPU 0)."""

from __future__ import annotations

from pathlib import Path

from sglang_stacks.config.memory_advice import MemoryAdvice
from sglang_stacks.hostops.gpu_room import holders, room_problem, server_gpus
from sglang_stacks.hostops.nvidia_smi import HostFacts, parse_compute_apps, parse_query_gpu
from tests.test_server_failure import plan

H200 = Path(__file__).parent / "fixtures" / "nvidia-smi" / "h200-1gpu"
FACTS = HostFacts(
    gpus=tuple(parse_query_gpu((H200 / "query-gpu.csv").read_text())),
    compute_apps=tuple(parse_compute_apps((H200 / "compute-apps.csv").read_text())),
    interconnect="single",
)


def advice(kv_cache_gb: float | None, fraction: float = 0.77) -> MemoryAdvice:
    """The campaign's plan (`test_server_failure.plan`) on this one-GPU H200 of 140.4 GB."""
    return plan(fraction).model_copy(update={"total_gb": 140.4, "tp_size": 1, "kv_cache_gb": kv_cache_gb})


def test_a_holder_on_the_servers_gpu_is_named_with_its_pid_memory_and_the_fraction_that_serves() -> None:
    problem = room_problem(holders(FACTS, [0]), advice(kv_cache_gb=12.0))

    assert problem is not None
    assert problem.startswith("pid 427 (python3) holds up to 19592 MiB on GPU 0.")
    assert "19.13 GB held there takes 14.73 GB of it, leaving none" in problem
    # (0.77 x 140.4 - 12) / (140.4 - 19.13) = 0.7925: the smallest fraction whose pool outgrows its share.
    assert (
        "Stop it on the host (`kill 427` there), or raise server.mem_fraction_static from 0.77 to 0.80"
        in problem
    )


def test_a_holder_the_kv_cache_can_give_up_lets_the_server_start() -> None:
    assert room_problem(holders(FACTS, [0]), advice(kv_cache_gb=15.0)) is None


def test_no_fraction_the_plan_allows_makes_room_says_so() -> None:
    problem = room_problem(holders(FACTS, [0]), advice(kv_cache_gb=1.0, fraction=0.92))

    assert problem is not None and "no mem_fraction_static the plan allows makes room" in problem


def test_a_holder_on_another_gpu_is_not_the_servers_concern() -> None:
    assert holders(FACTS, [1]) == []
    assert room_problem([], advice(kv_cache_gb=1.0)) is None


def test_without_a_recorded_plan_any_holder_is_named() -> None:
    problem = room_problem(holders(FACTS, [0]), None)

    assert problem is not None and "pid 427 (python3)" in problem and "`kill 427`" in problem


def test_the_servers_gpus_follow_cuda_visible_devices() -> None:
    assert server_gpus({}, 4) == [0, 1, 2, 3]
    assert server_gpus({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 2) == [4, 5]
