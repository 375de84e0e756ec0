"""The stack file a fleet's roll back deploys: the recorded configuration, with the secrets as the
stack file holds them (encrypted), never decrypted or dropped."""

from __future__ import annotations

import io
import stat
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from sglang_stacks.config.fleet import FleetSpec
from sglang_stacks.drive.fleet_rollback import FleetRollout, rollback_file
from sglang_stacks.errors import BenchmarkError, CanaryRegressionError, StacksError
from sglang_stacks.exits import ExitCode

STACK_FILE = """\
encryptionsalt: v1:salt
config:
  sglang-stacks:server:
    cuda_graph_max_bs: 128
    disable_custom_all_reduce: false
  sglang-stacks:sshPrivateKey:
    secure: v1:ciphertext
"""


def test_the_roll_back_file_holds_the_recorded_sections_and_the_encrypted_secrets(
    tmp_path: Path,
) -> None:
    stack_file = tmp_path / "Pulumi.fleet.yaml"
    stack_file.write_text(STACK_FILE)
    recorded = {
        "sglang-stacks:server": auto.ConfigValue('{"cuda_graph_max_bs":128,"max_running_requests":64}'),
        "sglang-stacks:sshPrivateKey": auto.ConfigValue("[secret]", secret=True),
        "sglang-stacks:hubToken": auto.ConfigValue("[secret]", secret=True),
    }
    out = tmp_path / "out"
    out.mkdir()

    written = rollback_file(stack_file, recorded, out)

    document = yaml.safe_load(written.read_text())
    assert document["encryptionsalt"] == "v1:salt"
    assert document["config"] == {
        "sglang-stacks:server": {"cuda_graph_max_bs": 128, "max_running_requests": 64},
        "sglang-stacks:sshPrivateKey": {"secure": "v1:ciphertext"},
    }
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stack_file.read_text() == STACK_FILE  # the user's file is left as it is


class _RegressingFleet:
    """The Automation API's view of a fleet stack whose update fails at its canary gate: ``up``
    reports the gate's error, as the engine does (the provider's message and its record), then
    fails; ``history`` holds ``succeeded``."""

    name = "fleet"

    def __init__(self, succeeded: list[auto.UpdateSummary], error: StacksError | None = None) -> None:
        self.succeeded, self.ups = succeeded, 0
        self.error = error or CanaryRegressionError(
            "The canary of fleet fleet regressed: tok/s 40.1 against 88.0 (tolerance 5 %). The roll "
            "stopped before the other hosts; the canary stays out of the router and the other replicas "
            "serve.",
            measurements="tok/s 40.1 against 88.0 (tolerance 5 %)",
            stack="fleet",
        )

    def history(self, show_secrets: bool = False) -> list[auto.UpdateSummary]:
        return self.succeeded

    def up(self, on_event: Callable[[auto.EngineEvent], None] | None = None, **options: Any) -> None:
        self.ups += 1
        gate = (
            "urn:pulumi:fleet::sglang-stacks::sglang-stacks:index:Fleet"
            "$pulumi-python:dynamic/sglang:CanaryGate::fleet-canary"
        )
        error = self.error
        # As the engine shows the provider's error to a driver, which asks for the record.
        said = f"{error.message}\n{error.record().line()}"
        message = f"sglang_stacks.errors.{type(error).__name__}: {said}"
        if on_event is not None:
            on_event(
                auto.EngineEvent(
                    1, 0, diagnostic_event=auto.DiagnosticEvent(message, "never", "error", urn=gate)
                )
            )
        raise auto.CommandError(auto.CommandResult("", "error: update failed", 255))


def _rollout(target: _RegressingFleet, on_regression: str, out: io.StringIO) -> FleetRollout:
    hosts = [{"state_dir": f"/var/tmp/h{i}", "server_port": 31000 + i} for i in range(3)]
    fleet = FleetSpec.model_validate({"hosts": hosts, "rollout": {"on_regression": on_regression}})
    return FleetRollout(Path("."), target, fleet, out, io.StringIO())  # type: ignore[arg-type]


def _succeeded() -> auto.UpdateSummary:
    return auto.UpdateSummary(
        kind="update",
        start_time=datetime(2026, 11, 30, 12, 0),
        message="",
        environment={},
        config={"sglang-stacks:server": {"value": '{"cuda_graph_max_bs":128}', "secret": False}},
        result="succeeded",
        end_time=datetime(2026, 11, 30, 12, 5),
    )


def test_a_regressed_canary_under_on_regression_stop_is_left_out_and_nothing_is_rolled_back() -> None:
    target, out = _RegressingFleet([_succeeded()]), io.StringIO()

    code = _rollout(target, "stop", out).run()

    assert code == ExitCode.REGRESSION
    assert target.ups == 1  # no second update: nothing relaunched
    said = out.getvalue()
    # The gate's error, which Pulumi prints, says the measurements; the rollout does not repeat them.
    assert "rollout: the canary of fleet regressed, as its gate's error above says." in said, said
    assert "40.1" not in said
    assert "on_regression is stop: the canary stays out of the router" in said, said
    assert "rolling the changed hosts back" not in said


def test_a_regressed_canary_of_a_fleet_never_deployed_before_has_nothing_to_roll_back_to() -> None:
    target, out = _RegressingFleet([]), io.StringIO()

    code = _rollout(target, "roll_back", out).run()

    assert code == ExitCode.REGRESSION
    assert target.ups == 1
    assert "fleet has no earlier successful update to roll back to: the canary stays out." in out.getvalue()


def test_a_canary_gate_that_judged_nothing_is_no_regression_and_nothing_is_rolled_back() -> None:
    unjudged = BenchmarkError(
        "The canary of fleet fleet is measured beside http://h1:31001 with both out of the router, but "
        "no other replica is in the router to serve meanwhile, so the canary was not judged.",
        stack="fleet",
    )
    target, out = _RegressingFleet([_succeeded()], unjudged), io.StringIO()

    code = _rollout(target, "roll_back", out).run()

    assert code == ExitCode.UPDATE_FAILED
    assert target.ups == 1  # a canary nobody judged slower is not rolled back
    said = out.getvalue()
    assert "the update of fleet failed (see above), at its canary gate, which judged nothing." in said, said
    assert "regressed" not in said
