"""What spans stacks, driven through Pulumi's Automation API: selecting a stack, writing a new
stack's file and creating it (``write_stack``, for campaign trials), copying a secret from one
stack to another (``copy_secret``, a pool host's SSH key to a trial), reading a stack's outputs, and
``rollout``, which deploys a stack and, when its regression gate fails and its stack file says
``on_regression: hand_back``, deploys the baseline stack again so the host serves it.

Every operation runs the ``pulumi`` on PATH in the project folder, with the backend and the
passphrase from the environment, exactly as ``pulumi up -s <stack>`` typed there would, and the
CLI reads the stack files itself. The rollout reads a stack's gate with the project's own stack
file reader, from ``stackConfigDir``: never through the Automation API's stack settings, which
would look for the file beside Pulumi.yaml.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml
from pulumi import automation as auto

from sglang_stacks import recover
from sglang_stacks.config.spec import CONFIG_NAMESPACE, GateSpec
from sglang_stacks.config.stackfile import load_stack_spec, stack_path
from sglang_stacks.errors import BenchmarkError, SpecError
from sglang_stacks.project import find_project_dir, stacks_dir
from sglang_stacks.results import gate, history
from sglang_stacks.results.stats import BenchmarkResult

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_PASSED",
    "EXIT_REGRESSION",
    "EXIT_UPDATE_FAILED",
    "copy_secret",
    "find_project_dir",
    "pulumi_command",
    "rollout",
    "select_stack",
    "stack_outputs",
    "stacks_dir",
    "write_stack",
]

EXIT_PASSED, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_UPDATE_FAILED = 0, 1, 2, 3


def select_stack(project_dir: Path, stack: str) -> auto.Stack:
    try:
        return auto.select_stack(stack, work_dir=str(project_dir))
    except auto.StackNotFoundError:
        raise SpecError(
            f"The backend has no stack {stack!r}. Check the name with `pulumi stack ls`, or create "
            f"it with `pulumi stack init {stack}`."
        ) from None
    except (auto.CommandError, OSError) as error:
        raise SpecError(
            f"Pulumi could not select stack {stack!r}: {error}. Put the project's Pulumi CLI on PATH "
            "and select its backend with `. scripts/env.sh`."
        ) from None


def write_stack(project_dir: Path, stack: str, sections: dict[str, Any], header: str) -> auto.Stack:
    """Create (or select) ``stack`` in the backend and write its stack file in ``stackConfigDir``:
    ``header`` as comment lines, the secrets settings Pulumi wrote (``encryptionsalt``) kept, and
    ``sections`` under ``config:`` as ``sglang-stacks:<section>``. The Automation API's own stack
    settings are not used: they would write the file beside Pulumi.yaml."""
    try:
        selected = auto.create_or_select_stack(stack, work_dir=str(project_dir))
    except (auto.CommandError, OSError) as error:
        raise SpecError(
            f"Pulumi could not create stack {stack!r}: {error}. Put the project's Pulumi CLI on PATH "
            "and select its backend with `. scripts/env.sh`."
        ) from None
    path = stack_path(stack, stacks_dir(project_dir))
    existing = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    document = {k: v for k, v in (existing or {}).items() if k != "config"}
    document["config"] = {f"{CONFIG_NAMESPACE}:{key}": value for key, value in sections.items()}
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    path.write_text(comments + yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return selected


def pulumi_command(target: auto.Stack, *args: str) -> auto.CommandResult:
    """``pulumi <args>`` in ``target``'s workspace (its folder, environment and CLI), run by the
    Automation API's own command runner, for what its ``Stack`` methods lack; its output stays in
    memory. Raises ``auto.CommandError``."""
    workspace = target.workspace
    assert isinstance(workspace, auto.LocalWorkspace)  # select_stack and write_stack make local ones
    return workspace.pulumi_command.run(list(args), workspace.work_dir, dict(workspace.env_vars))


def copy_secret(target: auto.Stack, key: str, source: str) -> None:
    """Set ``key`` of ``target`` to the secret ``key`` of stack ``source``, encrypted for ``target``:
    ``pulumi config cp``. The value stays inside the Pulumi CLI; ``Stack.set_config`` would pass it
    as an argument, which ``ps`` shows."""
    try:
        pulumi_command(target, "config", "cp", key, "--stack", source, "--dest", target.name)
    except auto.CommandError as error:
        said = [line.strip() for line in str(error).splitlines() if "error:" in line]
        raise SpecError(
            f"Pulumi could not copy the secret {key} of stack {source!r} to stack {target.name!r} "
            f"({said[-1] if said else 'see above'}). Check that `pulumi config -s {source}` lists {key} "
            "as [secret] and that the passphrase of both stacks is set."
        ) from None


def stack_outputs(stack: str, project_dir: Path | None = None) -> dict[str, Any]:
    """One stack's outputs as ``pulumi stack output --json`` prints them: secrets read ``[secret]``."""
    selected = select_stack(project_dir or find_project_dir(), stack)
    try:
        outputs = selected.outputs()
    except auto.CommandError as error:
        raise SpecError(
            f"Pulumi could not read the outputs of stack {stack!r}: {error}. Set the passphrase its "
            "secrets need (see README, Secrets) and try again."
        ) from None
    return {key: "[secret]" if output.secret else output.value for key, output in outputs.items()}


def stack_config(stack: str, project_dir: Path | None = None) -> dict[str, Any]:
    """One stack's config by key, secrets decrypted, JSON values parsed: for commands that reach
    the stack's host. Keep the values in memory; never print the secret ones."""
    selected = select_stack(project_dir or find_project_dir(), stack)
    try:
        config = selected.get_all_config()
    except auto.CommandError as error:
        raise SpecError(
            f"Pulumi could not read the config of stack {stack!r}: {error}. Set the passphrase its "
            "secrets need (see README, Secrets) and try again."
        ) from None
    values: dict[str, Any] = {}
    for key, item in config.items():
        try:
            values[key] = json.loads(item.value)
        except ValueError:
            values[key] = item.value
    return values


def _at_tok_s(done: auto.UpResult) -> str:
    """`` at 88.1 tok/s`` from an update's ``tok_s`` output, or nothing when it has none."""
    output = done.outputs.get("tok_s")
    return f" at {output.value:.1f} tok/s" if output and isinstance(output.value, int | float) else ""


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
                on_output=lambda line: print(line, file=self.out, flush=True),
                on_error=lambda line: print(line, file=self.err, flush=True),
                color="always" if self.out.isatty() else "never",
            )
        except auto.CommandError:
            return None  # Pulumi has printed why

    def run(self) -> int:
        name = self.target.name
        # Pulumi's own warning about them suggests an interactive refresh; say what clears them.
        pending = recover.pending_operations(name, self.project)
        if pending:
            self.say(recover.warning(name, pending))
        before = history.latest(self.db_path, name)
        done = self.up(self.target)
        if done is not None:
            passed = f", past its gate against {self.gate.baseline_stack}" if self.gate else ""
            self.say(f"{name} is up{_at_tok_s(done)}{passed}.")
            return EXIT_PASSED
        if self.gate is None:
            self.say(f"the update of {name} failed (see above); it has no gate, so nothing is handed back.")
            return EXIT_UPDATE_FAILED
        return self._after_failure(self.gate, before.id if before else 0)

    def _judged_result(self, since_id: int) -> BenchmarkResult | None:
        """The result the failed update's gate judged: the benchmark it recorded (a history row
        newer than ``since_id``), or, when the update only re-checked a changed gate, the result
        measured before, which is still the stack's output."""
        newest = history.latest(self.db_path, self.target.name)
        if newest is not None and newest.id > since_id:
            return newest.result
        benchmark = self.target.outputs().get("benchmark")
        return BenchmarkResult.model_validate(benchmark.value) if benchmark else None

    def _after_failure(self, spec_gate: GateSpec, since_id: int) -> int:
        """After a failed update: a regression (handed back or not), or a failure of another kind."""
        name, judged = self.target.name, self._judged_result(since_id)
        try:
            verdict = gate.evaluate(name, judged, spec_gate, self.db_path) if judged else None
        except BenchmarkError as error:
            self.say(f"the update of {name} failed and its gate could not judge it: {error}")
            return EXIT_UPDATE_FAILED
        if verdict is None or verdict.passed:
            self.say(f"the update of {name} failed (see above), not at its regression gate.")
            return EXIT_UPDATE_FAILED
        self.say(f"{name} regressed: {verdict.message}")
        if spec_gate.on_regression != "hand_back":
            self.say(f"{name}'s gate says on_regression: fail, so the host stays with it.")
            return EXIT_REGRESSION
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
        return EXIT_REGRESSION


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
    configuration instead (see `sglang_stacks.fleet_rollback`). Returns 0 passed, 1 regression
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
        # Imported here: the fleet's rollout takes this module's exit codes.
        from sglang_stacks.fleet_rollback import FleetRollout

        return FleetRollout(project, target, spec.fleet, out, err).run()
    if spec_gate is not None and spec_gate.on_regression == "hand_back":
        select_stack(
            project, spec_gate.baseline_stack
        )  # a baseline the backend lacks is bad input, found now
    return _Rollout(project, target, spec_gate, db_path, out, err).run()
