"""``sglang-stacks rollout`` of a fleet: ``pulumi up`` of the stack; when its canary regresses and
``fleet.rollout.on_regression`` is ``roll_back``, ``pulumi up`` again with the fleet's current
configuration, which relaunches the changed hosts on it and puts them back in the router.

The fleet's current configuration is the config of the stack's last successful update, as its
history records it (secrets as the stack file holds them, encrypted). It is deployed through a
config file of its own (``pulumi up --config-file``): the stack file stays as the user wrote it,
with the rejected change in it to fix or drop.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pulumi import automation as auto

from sglang_stacks.config.fleet import FleetSpec
from sglang_stacks.config.stackfile import StackText, stack_path
from sglang_stacks.drive.automation import for_people, outputs_of
from sglang_stacks.errors import CanaryRegressionError, failures_from_output
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import stacks_dir
from sglang_stacks.results.outputs import FleetOutputs

_CANARY = ":CanaryGate::"
"""What the URN of a fleet's canary gate contains (its resource type, ``sglang:CanaryGate``)."""


@dataclass
class _CanaryErrors:
    """Collects the errors Pulumi reports for the canary gate during an update."""

    messages: list[str] = field(default_factory=list)

    def __call__(self, event: auto.EngineEvent) -> None:
        found = event.diagnostic_event
        if found and found.severity == "error" and found.urn and _CANARY in found.urn:
            self.messages.append(found.message.strip())

    def regression(self) -> CanaryRegressionError | None:
        """The canary's regression, as its gate raised it (with the verdict's measurements), or None
        when the gate failed in another way or did not fail."""
        found = [error for m in self.messages for error in failures_from_output(m)]
        return next((error for error in found if isinstance(error, CanaryRegressionError)), None)


def deployed_config(stack: auto.Stack) -> tuple[str, dict[str, auto.ConfigValue]] | None:
    """When the stack's last successful ``pulumi up`` started, and its config (secrets left out:
    they are never decrypted here), or None."""
    for update in stack.history(show_secrets=False):
        if update.kind == "update" and update.result == "succeeded":
            return f"{update.start_time:%Y-%m-%d %H:%M:%S} UTC", dict(update.config)
    return None


def rollback_file(stack_file: Path, config: dict[str, auto.ConfigValue], folder: Path) -> Path:
    """A stack file holding ``config``: its plain values as recorded, its secrets and the secrets
    settings (``encryptionsalt``) as the stack file has them now, never decrypted."""
    document = StackText(stack_file.read_text(encoding="utf-8"), stack_file.name)
    current = document.config()
    values: dict[str, Any] = {}
    for key, item in config.items():
        if item.secret:
            if key in current:
                values[key] = current[key]
            continue
        text = item.value
        values[key] = json.loads(text) if isinstance(text, str) and text[:1] in "[{" else text
    document.replace_config(values)
    path = folder / stack_file.name
    path.write_text(document.text(), encoding="utf-8")
    os.chmod(path, 0o600)
    return path


@dataclass(frozen=True)
class FleetRollout:
    """One rollout of a fleet stack."""

    project: Path
    target: auto.Stack
    fleet: FleetSpec
    out: TextIO
    err: TextIO

    def say(self, line: str) -> None:
        print(f"rollout: {line}", file=self.out, flush=True)

    def up(
        self, on_event: Callable[[auto.EngineEvent], None] | None = None, **options: Any
    ) -> auto.UpResult | None:
        """``pulumi up`` of the fleet, its output streamed; None when it failed."""
        self.say(f"pulumi up -s {self.target.name}" + (" (rolling back)" if options else ""))
        try:
            return self.target.up(
                on_output=for_people(self.out, self.target.name),
                on_error=for_people(self.err, self.target.name),
                on_event=on_event,
                color="always" if self.out.isatty() else "never",
                show_secrets=False,  # its summary, unread, without decrypting the config's secrets
                **options,
            )
        except auto.CommandError:
            return None  # Pulumi has printed why

    def run(self) -> int:
        name, before = self.target.name, deployed_config(self.target)
        canary = _CanaryErrors()
        done = self.up(on_event=canary)
        if done is not None:
            outputs = outputs_of(done.outputs, FleetOutputs)
            at = f" at {outputs.tok_s:.1f} tok/s" if outputs else ""
            self.say(f"{name} is up{at}: every replica serves the new configuration through the router.")
            return ExitCode.OK
        regressed = canary.regression()
        if regressed is None:
            where = "not at its canary gate"
            if canary.messages:
                where = "at its canary gate, which judged nothing"
            self.say(
                f"the update of {name} failed (see above), {where}. The hosts it did not reach still serve "
                "the current configuration through the router; `pulumi up` of the previous stack file "
                "restores the others."
            )
            return ExitCode.UPDATE_FAILED
        # The gate's error above gives the measurements: they are not said again.
        self.say(f"the canary of {name} regressed, as its gate's error above says.")
        if self.fleet.rollout.on_regression == "stop":
            self.say("fleet.rollout.on_regression is stop: the canary stays out of the router.")
            return ExitCode.REGRESSION
        if before is None:
            self.say(f"{name} has no earlier successful update to roll back to: the canary stays out.")
            return ExitCode.REGRESSION
        return self._roll_back(*before)

    def _roll_back(self, started: str, config: dict[str, auto.ConfigValue]) -> int:
        name = self.target.name
        self.say(
            "rolling the changed hosts back to the fleet's current configuration (that of the update "
            f"of {started}); the stack file is left as it is"
        )
        with tempfile.TemporaryDirectory(prefix="sglang-stacks-rollback-") as folder:
            path = rollback_file(stack_path(name, stacks_dir(self.project)), config, Path(folder))
            done = self.up(config_file=str(path))
        if done is None:
            self.say(
                f"rolling back failed (see above); restore the previous stack file and run `pulumi up -s "
                f"{name}` once the cause is fixed."
            )
            return ExitCode.REGRESSION
        self.say(
            f"rolled back: all {self.fleet.replica_count} replicas serve the configuration of the update of "
            f"{started} through the router again. The change stays in the stack file, rejected by its "
            "canary: fix it, or restore the previous file."
        )
        return ExitCode.REGRESSION
