"""Preflight's memory plan against the emulator, candidate by candidate.

    python benchmarks/plan_agreement.py                       # 600 candidates, seed 1
    python benchmarks/plan_agreement.py --candidates 40 --json out.json

Candidates are drawn at random from ``benchmarks/agreement-space.yaml`` (releases, EAGLE-3 shapes,
CUDA-graph and chunk sizes, memory fractions, running limits, concurrency and prompt lengths) with
the campaign's own machinery: each is the stack a campaign would deploy. For each, the plan
(``sglang_stacks.config.memory.plan_memory``: what preflight, ``render`` and the search read) says
``fits``, ``does_not_fit`` (where) or ``unknown``; then the emulator runs it in process, in virtual
time, with its own code: the launch parsed and resolved (``launch.py``), its startup (``Boot``), a
request of a full prefill chunk, then the benchmark's closed loop at the candidate's concurrency
through the server's admission (``Engine.input_problem``) and its scheduler (``Engine``, the
prefill's memory check included). The two agree when the plan's ``fits`` is a server that starts,
prefills and serves, and its ``does_not_fit`` is a server that fails in the phase the plan names.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulated_trials import LaunchStopped, launch
from virtual_benchmark import ClosedLoop, NotifyingEngine, PrefillOutOfMemory, prefill_guard

from sglang_emulator.engine import Request
from sglang_emulator.memory import MemoryPlan
from sglang_emulator.pool_limits import PoolLimits
from sglang_stacks.campaign.axes import bind_host, candidate_base, combine
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.config.execution import execute_all
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import StackSpec, load_spec
from sglang_stacks.config.stackfile import read_stack_file
from sglang_stacks.errors import SpecError

ROOT = Path(__file__).resolve().parent.parent
SPACE = ROOT / "benchmarks" / "agreement-space.yaml"
WORKLOADS = {"concurrency": (1, 8, 32, 64), "input_len": (128, 1024, 4096, 16384), "output_len": (64, 256)}
"""What each candidate's benchmark asks, drawn with it (a campaign's axes vary only the server)."""
_STARTUP_PHASES = ("load", "kv_pool", "graphs", "draft")


@dataclass(frozen=True)
class Outcome:
    """What the emulator did with a candidate."""

    phase: str
    """``served``, ``launch`` (refused before starting), ``start``, ``prefill`` or ``workload``."""
    message: str = ""
    """The error line it printed or answered."""


@dataclass(frozen=True)
class Row:
    """One candidate: the plan's verdict, the emulator's outcome, and whether they agree."""

    labels: dict[str, str]
    verdict: str
    plan_phase: str | None
    outcome: Outcome
    agree: bool | None
    """None for a candidate the plan cannot judge (kept, never discarded)."""
    why: str = ""


def _outcome(spec: StackSpec) -> Outcome:
    try:
        launched = launch(spec)
    except LaunchStopped as stop:
        return Outcome("start" if stop.at_start else "launch", stop.message)
    config, profile, plan = launched.config, launched.profile, launched.plan
    limits, rules = launched.pool_limits(), launched.scheduling_rules()
    engine = NotifyingEngine(config, profile, limits, rules, prefill_guard(plan))
    bench = spec.benchmark
    try:
        probe = list(range(1, _probe_tokens(plan, limits) + 1))
        engine.submit(Request(rid="probe", prompt_ids=probe, max_new_tokens=1))
        engine.advance()
        refusal = engine.input_problem(bench.input_len)
        if refusal is not None:
            return Outcome("workload", refusal)
        streams = bench.concurrency[0]
        ClosedLoop(engine, bench.input_len, bench.output_len, bench.requests_per_repetition, streams, 1).run()
    except PrefillOutOfMemory as crash:
        return Outcome("prefill", str(crash))
    return Outcome("served")


def _probe_tokens(plan: MemoryPlan, limits: PoolLimits) -> int:
    """A full prefill chunk (``max_prefill_tokens`` unchunked), as long a prompt as the pool admits."""
    settings = plan.world.settings
    assert settings is not None
    chunk = settings.chunked_prefill_size
    chunk = chunk if chunk > 0 else settings.max_prefill_tokens
    return max(min(chunk, limits.max_req_input_len - 1), 1)


def _agree(
    verdict: str, plan_phase: str | None, plan_message: str | None, outcome: Outcome
) -> tuple[bool | None, str]:
    if verdict == "unknown":
        return None, "not judged by the plan; kept"
    if verdict == "fits":
        served = outcome.phase == "served"
        return served, "" if served else f"the emulator failed: {outcome}"
    if plan_phase in _STARTUP_PHASES:
        said = (plan_message or "").splitlines()[0]
        same = outcome.phase == "start" and said in outcome.message
        return same, "" if same else f"the plan says {plan_phase} ({said}); the emulator: {outcome}"
    same = outcome.phase == plan_phase
    return same, "" if same else f"the plan says {plan_phase}; the emulator: {outcome}"


def run(candidates: int, seed: int) -> list[Row]:
    """``candidates`` random candidates of the space, each planned and emulated."""
    campaign = load_campaign(SPACE)
    base = candidate_base(campaign, read_stack_file(campaign.base, ROOT / "stacks").sections)
    rng = random.Random(seed)
    points = [axis.points() for axis in campaign.axes]
    drawn: list[tuple[dict[str, str], StackSpec]] = []
    seen: set[str] = set()
    while len(drawn) < candidates:
        choice = {axis.title: rng.choice(each) for axis, each in zip(campaign.axes, points, strict=True)}
        candidate = combine(base, choice)
        workload = {key: rng.choice(values) for key, values in WORKLOADS.items()}
        labels = {**candidate.labels, **{key: str(value) for key, value in workload.items()}}
        identity = json.dumps(labels, sort_keys=True)
        if identity in seen:
            continue
        seen.add(identity)
        sections = bind_host(candidate.sections, campaign.pool[0])
        benchmark = {**sections["benchmark"], **workload, "concurrency": [workload["concurrency"]]}
        sections["benchmark"] = benchmark
        try:
            spec = load_spec(sections, f"agreement-{candidate.digest}")
        except SpecError:
            continue  # not a valid stack (the campaign's plan discards it before the memory plan)
        drawn.append((labels, spec))
    # Each release's own code resolves every launch drawn, one child interpreter per release.
    execute_all((spec, spec.environment.sglang_release) for _, spec in drawn)
    rows: list[Row] = []
    for labels, spec in drawn:
        plan = plan_memory(spec)
        outcome = _outcome(spec)
        agree, why = _agree(plan.verdict, plan.failure_phase, plan.failure, outcome)
        rows.append(Row(labels, plan.verdict, plan.failure_phase, outcome, agree, why))
    return rows


def summary(rows: list[Row]) -> dict[str, object]:
    """The figures docs/preflight.md reports."""
    judged = [r for r in rows if r.agree is not None]
    return {
        "candidates": len(rows),
        "verdicts": dict(Counter(r.verdict for r in rows)),
        "plan_phases": dict(Counter(r.plan_phase for r in rows if r.plan_phase)),
        "emulator_outcomes": dict(Counter(r.outcome.phase for r in rows)),
        "judged": len(judged),
        "agreements": sum(1 for r in judged if r.agree),
        "disagreements": [asdict(r) for r in judged if not r.agree],
        "kept_unjudged": sum(1 for r in rows if r.agree is None),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--candidates", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write every row and the summary here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = run(args.candidates, args.seed)
    figures = summary(rows)
    if args.json:
        args.json.write_text(json.dumps({"summary": figures, "rows": [asdict(r) for r in rows]}, indent=1))
    disagreements = [r for r in rows if r.agree is False]
    print(
        f"{figures['candidates']} candidates in {time.monotonic() - started:.0f} s: plan "
        f"{figures['verdicts']}, emulator {figures['emulator_outcomes']}; {figures['agreements']} of "
        f"{figures['judged']} judged agree, {len(disagreements)} disagree, "
        f"{figures['kept_unjudged']} kept unjudged"
    )
    for row in disagreements:
        print(f"  disagree: {row.labels}: {row.why}")
    return 0 if not disagreements else 1


if __name__ == "__main__":
    sys.exit(main())
