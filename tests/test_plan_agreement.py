"""benchmarks/plan_agreement.py on 500 candidates: preflight's memory plan and the emulator agree on every
candidate of a random sample (the plan's fits is a server that starts, prefills a full chunk and
serves its benchmark; its does-not-fit is a server that fails in the phase the plan names)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = 500
"""As many random candidates as the agreement is claimed for (about 25 s of CPU, the release's code
asked once per release)."""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("agreement") / "rows.json"
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/plan_agreement.py",
            "--candidates",
            str(CANDIDATES),
            "--seed",
            "7",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode in (0, 1), done.stderr
    loaded: dict[str, Any] = json.loads(out.read_text())
    return loaded


def test_the_plan_and_the_emulator_agree_on_every_judged_candidate(report: dict[str, Any]) -> None:
    summary = report["summary"]
    assert summary["candidates"] == CANDIDATES
    assert summary["disagreements"] == [], summary["disagreements"][:3]
    assert summary["agreements"] == summary["judged"] > 0


def test_the_sample_reaches_fitting_and_failing_launches(report: dict[str, Any]) -> None:
    # Not a sample of easy cases: some serve, some fail, and the failures are of several phases.
    outcomes = report["summary"]["emulator_outcomes"]
    assert outcomes.get("served", 0) > 0
    assert len([phase for phase in outcomes if phase != "served"]) >= 2, outcomes


def _emulated_hosts() -> list[tuple[str, int | None]]:
    """Every shipped stack on emulator hosts, as (stack, fleet host or None)."""
    from sglang_stacks.config.stackfile import load_stack_spec
    from tests._stacks import STACKS_DIR

    found: list[tuple[str, int | None]] = []
    for path in sorted(Path(STACKS_DIR).glob("Pulumi.*.yaml")):
        stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        spec = load_stack_spec(stack, STACKS_DIR)
        if spec.fleet is not None and spec.fleet.hosts:
            found += [(stack, i) for i, h in enumerate(spec.fleet.hosts) if h.kind == "emulator"]
        elif spec.fleet is None and spec.host.kind == "emulator":
            found.append((stack, None))
    return found


@pytest.mark.parametrize(("stack", "host"), _emulated_hosts())
def test_every_shipped_emulator_stack_is_planned_as_the_emulator_serves_it(
    stack: str, host: int | None
) -> None:
    # demo-fleet's model section names no vision tower; preflight once planned it as a text model
    # (fraction 0.856, 124,679 tokens) while the emulator served the profile's Kimi-K2.5 with its
    # tower (0.779, 13,667 tokens).
    from sglang_emulator.launch import parse_launch_flags, resolve_launch
    from sglang_emulator.memory import plan_memory as emulated_plan
    from sglang_emulator.profile_loading import load_profile
    from sglang_stacks.config.memory import plan_memory
    from sglang_stacks.config.render import render_argv
    from sglang_stacks.config.stackfile import load_stack_spec
    from tests._stacks import STACKS_DIR

    spec = load_stack_spec(stack, STACKS_DIR)
    spec = spec.for_host(host) if host is not None else spec
    release = spec.environment.sglang_release
    profile = load_profile(spec.environment.emulator.profile)
    argv = render_argv(spec.launch_flags(), release)
    config = resolve_launch(release, parse_launch_flags(release, argv), profile, argv=argv)
    planned = plan_memory(spec, release)
    if config.settings is not None and config.settings.refusal is not None:
        # The release's own code refuses the launch (ep-a2a on 0.5.23): the emulator stops before
        # planning, and the plan fails at launch with the same words.
        assert planned.failure_phase == "launch" and planned.failure is not None
        assert config.settings.refusal in planned.failure
        return
    served = emulated_plan(config, profile)

    assert planned.mem_fraction_static == pytest.approx(served.mem_fraction_static, abs=5e-5)
    assert planned.max_total_num_tokens == served.max_total_num_tokens
