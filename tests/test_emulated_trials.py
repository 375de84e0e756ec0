"""benchmarks/emulated_trials.py: a candidate is worked out with its own process environment (the
stack's ``environment.env``), as its launch would run, never with the harness's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sglang_stacks.config.stackfile import load_stack_spec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from emulated_trials import Workload, emulate  # noqa: E402

ONE_REQUEST = Workload(input_len=64, output_len=8, concurrency=(1,), warmup_requests=0, repetitions=1,
                       requests_per_repetition=1)  # fmt: skip


@pytest.mark.parametrize("harness_nccl_algo", [None, "Tree"])
def test_nccl_tree_fails_the_candidate_that_sets_it_and_no_other(
    monkeypatch: pytest.MonkeyPatch, harness_nccl_algo: str | None
) -> None:
    """The nccl-tree stack sets NCCL_ALGO=Tree in its environment and fails at CUDA-graph capture;
    the same launch without it starts. Whatever the harness's own process has set."""
    if harness_nccl_algo is None:
        monkeypatch.delenv("NCCL_ALGO", raising=False)
    else:
        monkeypatch.setenv("NCCL_ALGO", harness_nccl_algo)
    tree = load_stack_spec("nccl-tree", ROOT / "stacks")
    assert tree.environment.env == {"NCCL_ALGO": "Tree"}
    failed = emulate(tree, ONE_REQUEST)
    assert failed.failure is not None and failed.failure.startswith(
        "Exception: Capture cuda graph failed: NCCL error in: all_reduce"
    )
    assert failed.levels == ()
    plain = tree.model_copy(update={"environment": tree.environment.model_copy(update={"env": {}})})
    started = emulate(plain, ONE_REQUEST)
    assert started.failure is None and started.level(1).tok_s_mean > 0
