"""One server over two nodes (``--nnodes 2 --node-rank R --dist-init-addr``): two emulator processes
on this machine, each with its own GPU state, joined at rank 0's init address."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from sglang_emulator.launch import parse_launch_flags, resolve_launch
from sglang_emulator.launcher import RunningEmulator, free_port, start_emulator
from sglang_emulator.performance import PerformanceModel
from sglang_emulator.profile_loading import load_profile

BASE = ["--model", "/shared/kimi-k2.5-int4", "--tp", "16", "--trust-remote-code", "--nnodes", "2"]
BASE += ["--cuda-graph-max-bs", "128", "--disable-custom-all-reduce"]


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on, read from ``/proc`` (its socket inodes matched
    against the kernel's table of sockets in the LISTEN state)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    inodes = set()
    for fd in fd_dir.iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def node(tmp_path: Path, rank: int, init_port: int, wait: bool = False) -> RunningEmulator:
    flags = [*BASE, "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{init_port}"]
    return start_emulator(flags, state_dir=str(tmp_path / f"node{rank}"), wait=wait)


def test_rank_0_is_ready_only_once_every_node_joined_and_only_it_serves_http(tmp_path: Path) -> None:
    init_port = free_port()
    with node(tmp_path, 0, init_port) as rank0:
        assert not rank0.wait_ready(1.5), "rank 0 must wait for node 1"
        assert "Init torch distributed ends" not in rank0.log()
        assert init_port in listening_ports(rank0.process.pid), "rank 0 hosts the rendezvous"
        with node(tmp_path, 1, init_port) as rank1:
            assert rank0.wait_ready(30), rank0.log()
            log1 = rank1.log()
            assert "[c10d] The client socket has failed to connect" not in log1  # rank 0 was up first
            assert "node rank 1 of 2 joined the process group at 127.0.0.1:" in log1
            # Node 1 runs tensor-parallel ranks 8..15: its lines say TP8; it holds 1/16 of the weights.
            assert "TP8] Load weight end." in log1 and "mem usage=36.16 GB" in log1
            with pytest.raises(httpx.ConnectError):
                httpx.get(rank1.base_url + "/health", timeout=2)
            info = httpx.get(rank0.base_url + "/server_info", timeout=5).json()
            assert (info["tp_size"], info["nnodes"], info["node_rank"]) == (16, 2, 0)
            # The group is formed: rank 0 no longer hosts a rendezvous a later launch could join.
            # (Asked of rank 0's own sockets: another test may bind the freed port meanwhile.)
            assert init_port not in listening_ports(rank0.process.pid)


def test_a_rank_that_dies_takes_the_group_down_with_sglangs_lines(tmp_path: Path) -> None:
    init_port = free_port()
    with node(tmp_path, 1, init_port) as rank1, node(tmp_path, 0, init_port) as rank0:
        assert rank0.wait_ready(30), rank0.log()
        assert "node rank 1 of 2 joined the process group" in rank1.log()
        rank1.process.kill()
        assert rank0.process.wait(timeout=10) == -9
        log = rank0.log()
        assert "ncclRemoteError: A call failed possibly due to a network error or a remote process" in log
        assert "node rank 1 of 2 left the process group" in log
        # The last line of the crash; an access line of the readiness poll may still follow it, as
        # uvicorn writes one after its response is sent (met under load: a /health line last).
        crash = [line for line in log.splitlines() if '"GET /health' not in line]
        assert crash[-1].endswith("Received sigquit from a child process. It usually means the child failed.")


def test_node_1_goes_down_when_rank_0_does(tmp_path: Path) -> None:
    init_port = free_port()
    with node(tmp_path, 1, init_port) as rank1, node(tmp_path, 0, init_port) as rank0:
        assert rank0.wait_ready(30), rank0.log()
        rank0.stop()
        assert rank1.process.wait(timeout=10) == -9
        assert "[TP8] Scheduler hit an exception: torch.distributed.DistBackendError" in rank1.log()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--node-rank", "0"], "--nnodes 2 needs --dist-init-addr HOST:PORT"),
        (["--node-rank", "2", "--dist-init-addr", "127.0.0.1:1"], "--node-rank 2 is out of range"),
        (["--node-rank", "0", "--dist-init-addr", "nowhere"], "is not HOST:PORT"),
    ],
)
def test_a_group_that_cannot_form_is_refused_before_startup(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    server = start_emulator([*BASE, *flags], state_dir=str(tmp_path), wait=False)
    assert server.process.wait(timeout=30) == 2
    assert said in server.log()
    server.stop()


def test_tp_that_does_not_split_over_the_nodes_is_refused(tmp_path: Path) -> None:
    flags = [
        "--model",
        "m",
        "--tp",
        "9",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--dist-init-addr",
        "127.0.0.1:1",
    ]
    server = start_emulator(flags, state_dir=str(tmp_path), wait=False)
    assert server.process.wait(timeout=30) == 2
    assert "--tp-size 9 does not split evenly over --nnodes 2" in server.log()
    server.stop()


def test_a_node_that_never_comes_times_out_with_torchs_error(tmp_path: Path) -> None:
    flags = [*BASE, "--node-rank", "0", "--dist-init-addr", f"127.0.0.1:{free_port()}", "--dist-timeout", "1"]
    server = start_emulator(flags, state_dir=str(tmp_path), wait=False)
    started = time.monotonic()
    assert server.process.wait(timeout=30) == 1
    assert time.monotonic() - started < 20
    assert "DistStoreError: Timed out after 1 seconds waiting for clients. 1/2 clients joined" in server.log()
    server.stop()


def _model(argv: list[str]) -> PerformanceModel:
    profile = load_profile()
    return PerformanceModel(resolve_launch("0.5.8", parse_launch_flags("0.5.8", argv), profile), profile)


def test_all_reduces_across_nodes_pay_the_profiles_network() -> None:
    one_node = _model(
        ["--model", "m", "--tp", "8", "--cuda-graph-max-bs", "128", "--disable-custom-all-reduce"]
    )
    two_nodes = _model([*BASE[2:], "--model", "m", "--node-rank", "0", "--dist-init-addr", "h:1"])
    network = load_profile().host.network
    # Per all-reduce at batch 1: two hops of 20 us plus 2 x 1/2 x 14336 bytes at 400 Gbit/s.
    per_allreduce_us = 2 * network.latency_us + 14336 * 8 / (network.bandwidth_gbit_s * 1000)
    added_ms = 122 * per_allreduce_us / 1000
    assert two_nodes.decode_step_ms(1) == pytest.approx(one_node.decode_step_ms(1) + added_ms)
    assert one_node.single_stream_tok_s() == pytest.approx(89.5, rel=0.001)
    assert two_nodes.single_stream_tok_s() == pytest.approx(62.16, rel=0.001)
    # The bytes grow with the batch: at 64 requests the network costs more per step than at 1.
    assert two_nodes.decode_step_ms(64) - one_node.decode_step_ms(64) > added_ms + 1.0
