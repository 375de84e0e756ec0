"""Every out-of-memory fix the tool prints, taken as a user takes it, is a configuration its own
preflight accepts for that host and release: the shipped stacks at fractions on both sides of the
plan's, for each way SGLang runs out of memory."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sglang_stacks.config.memory_advice import memory_advice
from sglang_stacks.config.preflight import run_preflight
from sglang_stacks.config.spec import StackSpec, load_spec
from sglang_stacks.config.stackfile import read_stack_file
from sglang_stacks.hostops.failure_fixes import FailureContext
from sglang_stacks.hostops.server_failure import classify_failure
from tests._stacks import STACKS_DIR

# SGLang's own lines for each way a start runs out of memory (the KV pool, CUDA-graph capture,
# activations after the pool, the weights themselves).
OOM_LOGS = {
    "kv pool": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "cuda graphs": "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 0.50 GiB",
    "activations": (
        "KV Cache is allocated.\nCapture cuda graph end.\ntorch.OutOfMemoryError: CUDA out of memory."
    ),
    "weights": "Load weight begin. avail mem=94.00 GB\ntorch.OutOfMemoryError: CUDA out of memory.",
}
STACKS = ("baseline", "baseline-bs128", "eagle3-bs128", "eagle3-auto-mem", "eagle3-bs512")
# A fix names a setting and its new value in one of two shapes.
CHANGE = re.compile(
    r"server\.(\w+) from \S+(?: \(SGLang [^)]*\))? to (\d+(?:\.\d+)?)|set server\.(\w+): (\w+)"
)


def _sections(stack: str) -> dict[str, Any]:
    return read_stack_file(stack, STACKS_DIR).sections


def _spec(sections: dict[str, Any], stack: str, **server: Any) -> StackSpec:
    changed = {**sections, "server": {**sections["server"], **server}}
    return load_spec(changed, stack)


def _errors(spec: StackSpec) -> list[str]:
    release = spec.environment.sglang_release
    return [f"{f.key}: {f.message}" for f in run_preflight(spec, release) if f.severity == "error"]


def _changes(fix: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for match in CHANGE.finditer(fix):
        key, value = (match[1], match[2]) if match[1] else (match[3], match[4])
        found[key] = {"true": True, "false": False}.get(value, value)
        if isinstance(found[key], str):
            found[key] = float(value) if "." in value else int(value)
    return found


def _fractions(spec: StackSpec) -> list[float | None]:
    advice = memory_advice(spec)
    smallest, largest = advice.smallest_fitting_fraction, advice.largest_fitting_fraction
    assert smallest is not None and largest is not None, "every shipped stack has fractions that fit"
    return [None, round(smallest - 0.05, 2), smallest, round((smallest + largest) / 2, 2), largest, 0.97]


CASES = [(stack, cause) for stack in STACKS for cause in OOM_LOGS]


@pytest.mark.parametrize(("stack", "cause"), CASES, ids=[f"{s}-{c}" for s, c in CASES])
def test_an_out_of_memory_fix_taken_as_printed_passes_preflight(stack: str, cause: str) -> None:
    sections = _sections(stack)
    for fraction in _fractions(_spec(sections, stack)):
        spec = _spec(sections, stack, mem_fraction_static=fraction)
        fix = classify_failure(OOM_LOGS[cause], FailureContext(stack=stack, memory=memory_advice(spec))).fix
        changes = _changes(fix)
        if not changes:
            # A fix with no setting to change says why none would do, and what to do instead.
            assert re.search(r"No (larger )?mem_fraction_static fits|another process|more GPUs", fix), fix
            continue
        for key, value in changes.items():
            assert getattr(spec.server, key) != value, f"{fix!r} names the value already set"
        fixed = _spec(sections, stack, **{"mem_fraction_static": fraction, **changes})
        assert _errors(fixed) == [], f"at {fraction}: {fix!r} leads to a stack preflight refuses"


def test_a_fix_read_from_the_sentence_is_the_change_it_names() -> None:
    assert _changes("Raise server.mem_fraction_static from 0.77 to 0.86: SGLang") == {
        "mem_fraction_static": 0.86
    }
    assert _changes("Lower server.cuda_graph_max_bs from 128 to 64") == {"cuda_graph_max_bs": 64}
    assert _changes("Raise server.mem_fraction_static from unset (SGLang 0.5.8 chose 0.856) to 0.90") == {
        "mem_fraction_static": 0.9
    }
    assert _changes("set server.disable_cuda_graph: true") == {"disable_cuda_graph": True}
