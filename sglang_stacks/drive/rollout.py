"""``sglang-stacks rollout``: deploy a stack and, when its regression gate fails and its stack file
says ``on_regression: hand_back``, deploy the baseline stack again so the host serves it. A fleet
is handed to `fleet_rollback`, which rolls a regressed canary back.

The rollout reads a stack's gate with the project's own stack file reader, from
``stackConfigDir``, and drives Pulumi through `automation`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pulumi import automation as auto

from sglang_stacks.config.spec import GateSpec
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_stacks.drive import recover
from sglang_stacks.drive.automation import for_people, outputs_of, select_stack
from sglang_stacks.drive.fleet_rollback import FleetRollout
from sglang_stacks.errors import BenchmarkError
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import find_project_dir, stacks_dir
from sglang_stacks.resources import state
from sglang_stacks.results import gate, history
from sglang_stacks.results.outputs import DeploymentOutputs
from sglang_stacks.results.stats import BenchmarkResult

__all__ = ["rollout"]


def _at_tok_s(done: auto.UpResult) -> str:
    """`` at 88.1 tok/s`` from an update's outputs, or nothing when it has none."""
    outputs = outputs_of(done.outputs, DeploymentOutputs)
    return f" at {outputs.tok_s:.1f} tok/s" if outputs else ""


@dataclass(frozen=True)
class _Rollout:
    """One rollout: the project, the stack and its gate, the results history, and the terminal."""

    project: Path
    target: auto.Stack
    gate: GateSpec | None
    db_path: Path
    out: TextIO
    err: TextIO

    def say(self, line: str) -> None:
        print(f"rollout: {line}", file=self.out, flush=True)

    def up(self, stack: auto.Stack) -> auto.UpResult | None:
        """``pulumi up`` of ``stack``, its output streamed line by line; None when it failed."""
        self.say(f"pulumi up -s {stack.name}")
        try:
            return stack.up(
                on_output=for_people(self.out, stack.name),
                on_error=for_people(self.err, stack.name),
                color="always" if self.out.isatty() else "never",
                show_secrets=False,  # its summary, unread, without decrypting the config's secrets
            )
        except auto.CommandError:
            return None  # Pulumi has printed why

    def run(self) -> int:
        name = self.target.name
        # Pulumi's own warning about them suggests an interactive refresh; say what clears them.
        pending = recover.pending_operations(name, self.project)
        if pending:
            self.say(state.pending_warning(name, [p.label for p in pending]))
        before = history.latest(self.db_path, name)
        done = self.up(self.target)
        if done is not None:
            passed = f", past its gate against {self.gate.baseline_stack}" if self.gate else ""
            self.say(f"{name} is up{_at_tok_s(done)}{passed}.")
            return ExitCode.OK
        if self.gate is None:
            self.say(f"the update of {name} failed (see above); it has no gate, so nothing is handed back.")
            return ExitCode.UPDATE_FAILED
        return self._after_failure(self.gate, before.id if before else 0)

    def _judged_result(self, since_id: int) -> BenchmarkResult | None:
        """The result the failed update's gate judged: the benchmark it recorded (a history row
        newer than ``since_id``), or, when the update only re-checked a changed gate, the result
        measured before, which is still the stack's output."""
        newest = history.latest(self.db_path, self.target.name)
        if newest is not None and newest.id > since_id:
            return newest.result
        outputs = outputs_of(self.target.outputs(), DeploymentOutputs)
        return outputs.benchmark if outputs else None

    def _after_failure(self, spec_gate: GateSpec, since_id: int) -> int:
        """After a failed update: a regression (handed back or not), or a failure of another kind."""
        name, judged = self.target.name, self._judged_result(since_id)
        try:
            verdict = gate.evaluate(name, judged, spec_gate, self.db_path) if judged else None
        except BenchmarkError as error:
            self.say(f"the update of {name} failed and its gate could not judge it: {error}")
            return ExitCode.UPDATE_FAILED
        if verdict is None or verdict.passed:
            self.say(f"the update of {name} failed (see above), not at its regression gate.")
            return ExitCode.UPDATE_FAILED
        # The gate's error above gives the measurements: they are not said again.
        self.say(f"{name} regressed, as its gate's error above says.")
        if spec_gate.on_regression != "hand_back":
            self.say(f"{name}'s gate says on_regression: fail, so the host stays with it.")
            return ExitCode.REGRESSION
        baseline = select_stack(self.project, spec_gate.baseline_stack)
        self.say(f"handing the host back to {baseline.name} (on_regression: hand_back)")
        done = self.up(baseline)
        if done is None:
            self.say(
                f"handing the host back to {baseline.name} failed (see above); run `pulumi up -s "
                f"{baseline.name}` yourself once the cause is fixed."
            )
        else:
            self.say(
                f"{baseline.name} serves again{_at_tok_s(done)}; {name} ran at "
                f"{verdict.candidate_tok_s:.1f} tok/s and its update stays failed."
            )
        return ExitCode.REGRESSION


def rollout(
    stack: str,
    *,
    db_path: Path,
    project_dir: Path | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """``pulumi up`` of ``stack``; when its gate fails and it says ``on_regression: hand_back``,
    ``pulumi up`` of the baseline. A fleet whose canary regresses is rolled back to its current
    configuration instead (see `sglang_stacks.drive.fleet_rollback`). Returns 0 passed, 1 regression
    (handed back, rolled back or not), 3 the update failed otherwise; Pulumi's output streams to
    ``out`` and ``err`` meanwhile.

    Bad input (no project, an invalid stack file, a stack the backend lacks) raises SpecError
    before anything is deployed.
    """
    project = project_dir or find_project_dir()
    spec = load_stack_spec(stack, stacks_dir(project))
    spec_gate = spec.gate
    target = select_stack(project, stack)
    if spec.fleet is not None:
        return FleetRollout(project, target, spec.fleet, out, err).run()
    if spec_gate is not None and spec_gate.on_regression == "hand_back":
        select_stack(
            project, spec_gate.baseline_stack
        )  # a baseline the backend lacks is bad input, found now
    return _Rollout(project, target, spec_gate, db_path, out, err).run()
