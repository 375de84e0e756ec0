"""The nvidia-smi shim prints the real tool's formats (checked against captured output)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_emulator.launcher import start_emulator

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi" / "h200-1gpu"
H200 = "h200-1gpu-llama-3.1-8b"
QUERY = (
    "index,uuid,name,memory.total,memory.used,memory.free,compute_cap,driver_version,pci.bus_id,power.limit"
)
APPS = "pid,process_name,used_memory,gpu_uuid"


def smi(args: list[str], state: Path, profile: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SGLANG_EMULATOR_STATE_DIR": str(state)}
    if profile:
        env["SGLANG_EMULATOR_PROFILE"] = profile
    return subprocess.run(
        [sys.executable, "-m", "sglang_emulator.nvidia_smi", *args], capture_output=True, text=True, env=env
    )


def fixture(name: str) -> str:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"fixture {name} is not in this checkout")
    return path.read_text()


def test_plain_output_matches_the_captured_h200_idle_output(tmp_path: Path) -> None:
    got = smi([], tmp_path, H200).stdout
    expected = fixture("nvidia-smi.txt")
    assert got.splitlines()[1:] == expected.splitlines()[1:]
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}       ", got.splitlines()[0])


def test_query_formats_match_the_captured_csv(tmp_path: Path) -> None:
    got = smi([f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], tmp_path, H200).stdout
    assert got == fixture("query-gpu.csv")
    header = smi(["--query-gpu=index,name,memory.total,compute_cap", "--format=csv"], tmp_path, H200).stdout
    assert header == fixture("query-gpu-header.csv")
    assert smi(["topo", "-m"], tmp_path, H200).stdout == fixture("topo.txt")


def test_default_profile_is_eight_pcie_blackwell_gpus(tmp_path: Path) -> None:
    rows = smi(["--query-gpu=index,name,memory.total,compute_cap", "--format=csv,noheader,nounits"], tmp_path)
    lines = rows.stdout.splitlines()
    assert len(lines) == 8
    assert lines[0] == "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 12.0"
    topo = smi(["topo", "-m"], tmp_path).stdout
    row0 = topo.splitlines()[1].split("\t")
    assert row0[:9] == ["GPU0", " X ", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert "NV" not in "".join(row0)
    assert "|   0  NVIDIA RTX PRO 6000 Blac...    On  |" in smi([], tmp_path).stdout


def test_memory_used_follows_a_running_emulated_server(tmp_path: Path) -> None:
    assert smi([f"--query-compute-apps={APPS}", "--format=csv,noheader,nounits"], tmp_path).stdout == ""
    flags = ["--model", "m", "--tp", "8", "--cuda-graph-max-bs", "128"]
    with start_emulator(flags, state_dir=str(tmp_path)) as server:
        assert server.wait_ready(30)
        apps = smi([f"--query-compute-apps={APPS}", "--format=csv,noheader,nounits"], tmp_path).stdout
        rows = [line.split(", ") for line in apps.splitlines()]
        assert len(rows) == 8 and {r[0] for r in rows} == {str(server.process.pid)}
        used = smi(["--query-gpu=index,memory.used,memory.free", "--format=csv,noheader,nounits"], tmp_path)
        per_gpu = [line.split(", ") for line in used.stdout.splitlines()]
        assert all(int(u) > 70_000 for _, u, _ in per_gpu)
        assert int(per_gpu[0][1]) + int(per_gpu[0][2]) + 611 == 97887
        plain = smi([], tmp_path).stdout
        assert re.search(rf"\|\s+0\s+N/A\s+N/A\s+{server.process.pid}\s+C\s+\S+\s+\d+MiB \|", plain)
    assert smi(["--query-gpu=memory.used", "--format=csv,noheader,nounits"], tmp_path).stdout == "0\n" * 8


def test_stale_records_of_dead_servers_are_ignored(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    (tmp_path / f"{pid}.json").write_text(
        f'{{"pid": {pid}, "start_ticks": null, "process_name": "python3", '
        '"memory_mib_by_gpu": {"0": 50000}, "port": 1}'
    )
    assert (
        smi(["--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"], tmp_path).stdout == "0\n"
    )


def test_unknown_query_field_exits_2_like_nvidia_smi(tmp_path: Path) -> None:
    result = smi(["--query-gpu=index,bogus", "--format=csv"], tmp_path)
    assert result.returncode == 2
    assert 'Field "bogus" is not a valid field to query.' in result.stdout
