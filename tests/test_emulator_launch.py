"""Launch flags are parsed with the emulated release's real table: rejections match SGLang's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sglang_emulator.launch import parse_launch_flags, resolve_launch
from sglang_emulator.profile_loading import load_profile

ROOT = Path(__file__).resolve().parent.parent


def run_emulator(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sglang_emulator", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
    )


def test_version_prints_the_emulated_release() -> None:
    assert run_emulator(["--version"]).stdout.strip() == "0.5.8"
    assert run_emulator(["--version"], SGLANG_EMULATOR_RELEASE="0.5.23").stdout.strip() == "0.5.23"


def test_version_among_launch_flags_is_rejected_like_the_release() -> None:
    result = run_emulator(["--model", "m", "--version"])
    assert result.returncode == 2
    assert "unrecognized arguments: --version" in result.stderr


def test_cuda_graph_max_bs_is_ambiguous_on_0_5_23() -> None:
    result = run_emulator(["--model", "m", "--cuda-graph-max-bs", "128"], SGLANG_EMULATOR_RELEASE="0.5.23")
    assert result.returncode == 2
    assert "ambiguous option: --cuda-graph-max-bs could match" in result.stderr
    assert "sglang-emulator: emulating SGLang 0.5.23" in result.stderr


def test_unknown_flag_and_missing_model_exit_2() -> None:
    unknown = run_emulator(["--model", "m", "--no-such-flag"])
    assert unknown.returncode == 2 and "unrecognized arguments: --no-such-flag" in unknown.stderr
    missing = run_emulator(["--tp", "8"])
    assert missing.returncode == 2 and "--model-path" in missing.stderr


def test_bad_choice_names_the_allowed_values() -> None:
    result = run_emulator(["--model", "m", "--moe-a2a-backend", "flashinfer"])
    assert result.returncode == 2
    assert "invalid choice: 'flashinfer'" in result.stderr


def test_unknown_release_is_refused_with_the_fix() -> None:
    result = run_emulator(["--model", "m"], SGLANG_EMULATOR_RELEASE="0.5.24")
    assert result.returncode == 2
    assert "'0.5.24'" in result.stderr and "nearest emulated releases are 0.5.23" in result.stderr


def test_0_5_23_uses_its_own_cuda_graph_flag() -> None:
    args = parse_launch_flags(
        "0.5.23", ["--model", "m", "--tp-size", "8", "--cuda-graph-max-bs-decode", "64"]
    )
    config = resolve_launch("0.5.23", args, load_profile())
    assert config.cuda_graph_max_bs == 64
    assert config.tp_size == 8
    assert config.server_args["cuda_graph_max_bs_decode"] == 64


@pytest.mark.parametrize(
    ("flags", "count", "largest"),
    [
        ("--cuda-graph-max-bs 128", 20, 128),
        ("--cuda-graph-max-bs 512", 52, 512),
        # 0.5.8 captures its list's sizes up to the max, not the max itself (0.5.10 on add it).
        ("--cuda-graph-max-bs 100", 16, 96),
        # Speculative decoding captures more small sizes (0.5.8's own list).
        ("--cuda-graph-max-bs 128 --speculative-algorithm EAGLE", 35, 128),
    ],
)
def test_captured_batch_sizes_are_the_releases(flags: str, count: int, largest: int) -> None:
    argv = ["--model", "m", "--tp-size", "8", *flags.split()]
    config = resolve_launch("0.5.8", parse_launch_flags("0.5.8", argv), load_profile())
    assert len(config.cuda_graph_bs) == count
    assert config.cuda_graph_bs[-1] == largest


def test_speculative_defaults_follow_sglang() -> None:
    profile = load_profile()
    flags = "--model m --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1"
    args = parse_launch_flags("0.5.8", flags.split())
    config = resolve_launch("0.5.8", args, profile)
    assert config.speculative is not None
    assert config.speculative.num_draft_tokens == 4  # topk 1 forces steps + 1
    assert config.max_running_requests == 48


@pytest.mark.parametrize(
    ("release", "argv", "graph_dest"),
    [
        ("0.5.1", ["--tensor-parallel-size", "4", "--cuda-graph-max-bs", "48"], "cuda_graph_max_bs"),
        ("0.5.13.post1", ["--tp-size", "4", "--cuda-graph-max-bs", "48"], "cuda_graph_max_bs"),
        # 0.5.14 still takes the old spelling, as a deprecated alias of the decode flag.
        ("0.5.14", ["--tp-size", "4", "--cuda-graph-max-bs", "48"], "cuda_graph_max_bs_decode"),
        (
            "0.5.20",
            ["--tensor-parallel-size", "4", "--cuda-graph-max-bs-decode", "48"],
            "cuda_graph_max_bs_decode",
        ),
    ],
)
def test_every_release_is_read_through_the_one_rename_table(release, argv, graph_dest) -> None:
    config = resolve_launch(release, parse_launch_flags(release, ["--model", "m", *argv]), load_profile())
    assert (config.tp_size, config.cuda_graph_max_bs) == (4, 48)
    assert config.server_args["tp_size"] == 4 and "tensor_parallel_size" not in config.server_args
    assert config.server_args[graph_dest] == 48
