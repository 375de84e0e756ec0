"""The adapter to Pulumi's Automation API: selecting a stack, writing a new stack's file and
creating it (``write_stack``, for campaign trials), running a raw ``pulumi`` command in a stack's
workspace, copying a secret from one stack to another (``copy_secret``, a pool host's SSH key to a
trial), reading a stack's outputs and config. No policy: what to deploy when is `rollout`'s.

Every operation runs the ``pulumi`` on PATH in the project folder, with the backend and the
passphrase from the environment, exactly as ``pulumi up -s <stack>`` typed there would, and the
CLI reads the stack files itself: never through the Automation API's stack settings, which would
look for the file beside Pulumi.yaml.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pulumi import automation as auto
from pydantic import BaseModel, ValidationError

from sglang_stacks.config.stackfile import stack_path, write_stack_file
from sglang_stacks.errors import SpecError
from sglang_stacks.project import find_project_dir, stacks_dir

__all__ = [
    "copy_secret",
    "outputs_of",
    "pulumi_command",
    "read_outputs",
    "select_stack",
    "stack_config",
    "stack_outputs",
    "write_stack",
]


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
    write_stack_file(stack_path(stack, stacks_dir(project_dir)), sections, header)
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
    """One stack's outputs as ``pulumi stack output --json`` prints them (secrets read ``[secret]``),
    for a reader that names what is wrong with them (``compare`` reads them into its model)."""
    outputs = _outputs(select_stack(project_dir or find_project_dir(), stack))
    return {key: "[secret]" if output.secret else output.value for key, output in outputs.items()}


OutputsT = TypeVar("OutputsT", bound=BaseModel)


def outputs_of(outputs: Mapping[str, auto.OutputValue], model: type[OutputsT]) -> OutputsT | None:
    """A stack's outputs (an update's, or ``Stack.outputs()``) read into ``model`` (the stack
    kind's `sglang_stacks.results.outputs` model); None when the stack has none, or outputs of
    another kind."""
    values = {key: "[secret]" if output.secret else output.value for key, output in outputs.items()}
    if not values:
        return None
    try:
        return model.model_validate(values)
    except ValidationError:
        return None


def read_outputs(stack: str, model: type[OutputsT], project_dir: Path | None = None) -> OutputsT | None:
    """One stack's outputs read into ``model``; None when it has none (or of another kind)."""
    return outputs_of(_outputs(select_stack(project_dir or find_project_dir(), stack)), model)


def _outputs(selected: auto.Stack) -> Mapping[str, auto.OutputValue]:
    try:
        return selected.outputs()
    except auto.CommandError as error:
        raise SpecError(
            f"Pulumi could not read the outputs of stack {selected.name!r}: {error}. Set the passphrase "
            "its secrets need (see README, Secrets) and try again."
        ) from None


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
