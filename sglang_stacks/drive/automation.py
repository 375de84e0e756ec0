"""The adapter to Pulumi's Automation API: selecting a stack, writing a new stack's file and
creating it (``write_stack``, for campaign trials), running a raw ``pulumi`` command in a stack's
workspace, copying a secret from one stack to another (``copy_secret``, a pool host's SSH key to a
trial), reading a stack's outputs and config, and letting go of the lock a killed update left
(``cancel_dead_lock``). No policy: what to deploy when is `rollout`'s.

Every operation runs the ``pulumi`` on PATH in the project folder, with the backend and the
passphrase from the environment, exactly as ``pulumi up -s <stack>`` typed there would, and the
CLI reads the stack files itself: never through the Automation API's stack settings, which would
look for the file beside Pulumi.yaml.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO, TypeVar

from pulumi import automation as auto
from pydantic import BaseModel, ValidationError

from sglang_stacks.config.stackfile import stack_path, write_stack_file
from sglang_stacks.drive._workspace import TORN_READ, UsersWorkspace, cli
from sglang_stacks.errors import FAILURE_TAG, RECORDS_ENV, PulumiError, SpecError
from sglang_stacks.hostops import backend_lock as locks
from sglang_stacks.project import find_project_dir, stacks_dir

__all__ = [
    "cancel_dead_lock",
    "copy_secret",
    "for_people",
    "no_stack",
    "open_stack",
    "outputs_of",
    "pulumi_command",
    "read_outputs",
    "select_stack",
    "stack_config",
    "stack_outputs",
    "write_stack",
]


def for_people(stream: TextIO, stack: str | None = None) -> Callable[[str], None]:
    """Writes the lines of Pulumi's output a person reads to ``stream``: the tagged record that
    follows each error of this tool (`sglang_stacks.errors.FAILURE_TAG`) is left out. It repeats
    the message printed just above it, for a driver to read back, and the driver reads it from the
    engine's events or its own log, not from what it shows. Pulumi's refusal of ``stack``'s update
    lock, which names only `pulumi cancel`, is followed by the one command that also clears what a
    killed update left."""

    def write(line: str) -> None:
        if FAILURE_TAG not in line:
            print(line, file=stream, flush=True)
        if stack is not None and locks.LOCKED in line:
            print(locks.recover_advice(stack), file=stream, flush=True)

    return write


def _open(project_dir: Path, stack: str, *, create: bool, checked: bool = True) -> auto.Stack:
    # Every `pulumi` of a driver asks for the errors' typed records, which it reads back.
    workspace = UsersWorkspace(work_dir=str(project_dir), env_vars={RECORDS_ENV: "1"}, pulumi_command=cli())
    workspace.checks_stack = checked
    if not create:
        return auto.Stack.select(stack, workspace)
    try:  # created at once: a new stack, the common case, costs one CLI process, not two
        return auto.Stack.create(stack, workspace)
    except auto.StackAlreadyExistsError:
        return auto.Stack.select(stack, workspace)


def select_stack(project_dir: Path, stack: str) -> auto.Stack:
    """``stack`` of the project's backend, opened without selecting it in the user's workspace."""
    try:
        return _open(project_dir, stack, create=False)
    except (auto.CommandError, OSError) as error:
        raise _unreadable(stack, error) or _no_cli(stack, error) from None


def open_stack(project_dir: Path, stack: str) -> auto.Stack:
    """``stack`` of the project's backend, opened without asking the CLI first, for an operation
    that names it (``--stack``) and so fails when it is not there: `auto.StackNotFoundError`, which
    `no_stack` words as `select_stack` does."""
    try:
        return _open(project_dir, stack, create=False, checked=False)
    except OSError as error:
        raise _no_cli(stack, error) from None


def _unreadable(stack: str, error: Exception) -> SpecError | None:
    """The error of a read of ``stack`` that found no such stack, or its state's attributes cut
    short, in words and with the fix; None for any other error."""
    if isinstance(error, auto.StackNotFoundError):
        return no_stack(stack)
    if isinstance(error, auto.CommandError) and TORN_READ in str(error):
        return SpecError(
            f"Pulumi could not read stack {stack!r}: its state's attributes file "
            f"(`.pulumi/stacks/<project>/{stack}.json.attrs` in the backend) stayed empty or cut "
            "short. If no update is writing it, delete that file (Pulumi reads the stack without "
            "it) and try again."
        )
    return None


def said(error: Exception) -> str:
    """What a failed command said, on one line: the Pulumi CLI's last ``error:`` line on stderr (else
    its last line there, else on stdout) and how it exited, or another error's first line."""
    text = str(error)
    if not isinstance(error, auto.CommandError):
        lines = text.strip().splitlines()
        return lines[0] if lines else type(error).__name__
    code, _, rest = text.partition(" code: ")[2].partition("\n stdout: ")
    stdout, _, stderr = rest.partition("\n stderr: ")
    printed = [line.strip() for line in (stderr.strip() or stdout).splitlines() if line.strip()]
    errors = [line for line in printed if line.startswith("error:")]
    words = (errors or printed or ["it printed nothing"])[-1]
    exit_code = int(code) if code.strip().lstrip("-").isdigit() else None
    if exit_code is not None and exit_code < 0 and -exit_code in set(signal.Signals):
        return f"{words} (the CLI was stopped by {signal.Signals(-exit_code).name})"
    return f"{words} (exit code {code.strip() or 'unknown'})"


def no_stack(stack: str) -> SpecError:
    """The backend has no ``stack``: in words, with the fix."""
    return SpecError(
        f"The backend has no stack {stack!r}. Check the name with `pulumi stack ls`, or create "
        f"it with `pulumi stack init {stack}`."
    )


def _no_cli(stack: str, error: Exception) -> SpecError:
    return SpecError(
        f"Pulumi could not select stack {stack!r}: {said(error)}. Put the project's Pulumi CLI on PATH "
        "and select its backend with `. scripts/env.sh`."
    )


def write_stack(project_dir: Path, stack: str, sections: dict[str, Any], header: str) -> auto.Stack:
    """Create (or select) ``stack`` in the backend and write its stack file in ``stackConfigDir``:
    ``header`` as comment lines, the secrets settings Pulumi wrote (``encryptionsalt``) kept, and
    ``sections`` under ``config:`` as ``sglang-stacks:<section>``. The Automation API's own stack
    settings are not used: they would write the file beside Pulumi.yaml."""
    try:
        selected = _open(project_dir, stack, create=True)
    except (auto.CommandError, OSError) as error:
        raise SpecError(
            f"Pulumi could not create stack {stack!r}: {said(error)}. Put the project's Pulumi CLI on PATH "
            "and select its backend with `. scripts/env.sh`."
        ) from None
    write_stack_file(stack_path(stack, stacks_dir(project_dir)), sections, header)
    return selected


def pulumi_command(
    target: auto.Stack, *args: str, on_output: Callable[[str], None] | None = None
) -> auto.CommandResult:
    """``pulumi <args>`` in ``target``'s workspace (its folder, environment and CLI), run by the
    Automation API's own command runner, for what its ``Stack`` methods lack; its output stays in
    memory, and goes line by line to ``on_output`` (both streams) when given. Raises
    ``auto.CommandError``."""
    workspace = target.workspace
    assert isinstance(workspace, auto.LocalWorkspace)  # select_stack and write_stack make local ones
    env = dict(workspace.env_vars)
    return workspace.pulumi_command.run(list(args), workspace.work_dir, env, on_output, on_output)


def cancel_dead_lock(target: auto.Stack, wait_s: float = locks.LOCK_HOLDER_EXIT_S) -> str | None:
    """Let go of the update lock a killed ``pulumi`` left on ``target`` (``pulumi cancel``), only
    when every process holding it ran on this machine and none runs any more. Says what was done,
    or None when the stack holds no lock. PulumiError when a live update, or one of another
    machine, holds it: the lock is theirs. A holder of this machine has ``wait_s`` to end first
    (a process killed a moment ago may not be gone yet)."""
    workspace = target.workspace
    env = dict(workspace.env_vars) if isinstance(workspace, auto.LocalWorkspace) else {}
    backend = env.get("PULUMI_BACKEND_URL") or os.environ.get("PULUMI_BACKEND_URL", "")
    holders = [lock for _, lock in locks.read_locks(backend, target.name)]
    if not holders:
        return None
    here = socket.gethostname()
    deadline = time.monotonic() + wait_s
    while any(h.hostname == here and locks.holds(h) for h in holders) and time.monotonic() < deadline:
        time.sleep(0.5)
    for holder in holders:
        if holder.hostname != here or locks.holds(holder):
            where = "on this machine" if holder.hostname == here else f"on {holder.hostname}"
            raise PulumiError(
                f"Stack {target.name!r} is locked by an update that may still run (pid {holder.pid} "
                f"{where}). Let it finish; once no `pulumi` of it runs, `pulumi cancel -s {target.name}` "
                "lets go of the lock."
            )
    try:
        pulumi_command(target, "cancel", "--yes", "--stack", target.name)
    except auto.CommandError as error:
        raise PulumiError(f"`pulumi cancel -s {target.name}` failed: {said(error)}") from None
    pids = ", ".join(str(h.pid) for h in holders)
    return f"cancelled the lock of a killed update (pid {pids}, no longer running)"


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
    outputs = _outputs(open_stack(project_dir or find_project_dir(), stack))
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
    return outputs_of(_outputs(open_stack(project_dir or find_project_dir(), stack)), model)


def _outputs(selected: auto.Stack) -> Mapping[str, auto.OutputValue]:
    try:
        return selected.outputs()
    except auto.CommandError as error:
        raise _unreadable(selected.name, error) or SpecError(
            f"Pulumi could not read the outputs of stack {selected.name!r}: {said(error)}. Set the "
            "passphrase its secrets need (see README, Secrets) and try again."
        ) from None


def stack_config(stack: str, project_dir: Path | None = None) -> dict[str, Any]:
    """One stack's config by key, secrets decrypted, JSON values parsed: for commands that reach
    the stack's host. Keep the values in memory; never print the secret ones."""
    selected = open_stack(project_dir or find_project_dir(), stack)
    try:
        config = selected.get_all_config()
    except auto.CommandError as error:
        raise _unreadable(stack, error) or SpecError(
            f"Pulumi could not read the config of stack {stack!r}: {said(error)}. Set the passphrase its "
            "secrets need (see README, Secrets) and try again."
        ) from None
    values: dict[str, Any] = {}
    for key, item in config.items():
        try:
            values[key] = json.loads(item.value)
        except ValueError:
            values[key] = item.value
    return values
