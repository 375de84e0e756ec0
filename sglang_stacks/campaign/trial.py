"""One trial on one host (or one pool fleet): its stack file written, ``up`` (deploy and benchmark),
then ``destroy``, through the Automation API, with Pulumi's output kept in
``reports/<campaign>/logs/<stack>.log``.

Every trial's stack is destroyed after its benchmark, whether it won, lost or failed: a sweep
leaves no server running and no host claimed. The empty stack then leaves the backend and its file
``stacks/``, so a sweep does not crowd ``pulumi stack ls`` with hundreds of empty trials (its
results stay in the study and the results history, and ``sweep promote`` rebuilds a trial from
the campaign); with ``keep_stacks`` both stay, and ``pulumi up -s <stack>`` deploys that
configuration again.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from sglang_stacks.campaign.axes import bind_host
from sglang_stacks.campaign.keys import give_secrets
from sglang_stacks.campaign.model_pool import PoolHost
from sglang_stacks.campaign.plan import PlanRow
from sglang_stacks.config.stackfile import stack_path
from sglang_stacks.drive import automation, recover
from sglang_stacks.errors import Cause, SpecError, StacksError, failure_from_output
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import stacks_dir
from sglang_stacks.resources.state import resources_of
from sglang_stacks.results.outputs import DeploymentOutputs, FleetOutputs
from sglang_stacks.results.stats import BenchmarkResult

__all__ = ["TrialFailure", "TrialRunner", "classify"]


@dataclass(frozen=True)
class TrialFailure:
    """Why an update failed: a class and the line that says so."""

    cause: Cause
    message: str


REMOVAL_REFUSED = "refusing to remove stack because it still contains resources"
"""What ``pulumi destroy --remove`` says when the destroy left resources (the stack stays)."""
_TAIL_LINES = 3
"""Lines of Pulumi's output a failure with no error line quotes."""


def classify(output: str, *, exit_code: int | None = None, log: str = "the trial's log") -> TrialFailure:
    """The cause of a failed ``pulumi up`` from the error record in its output (see
    `sglang_stacks.errors`). When no error of this tool failed the update, Pulumi did (``pulumi``):
    its last error line, or with none its exit code and last lines, and where its whole output
    is (``log``)."""
    error = failure_from_output(output)
    if error is not None:
        return TrialFailure(error.cause, error.summary)
    # The class and the fix first: the report's table shows a message's first 200 characters.
    fix = f"fix what it names (its whole output is in {log})"
    errors = [line.strip() for line in output.splitlines() if "error" in line.lower()]
    if errors:
        return TrialFailure(
            Cause.PULUMI, f'Pulumi failed the update with an error of its own; {fix}: "{errors[-1]}"'
        )
    lines = [line.strip() for line in output.splitlines() if line.strip()][-_TAIL_LINES:]
    code = "" if exit_code is None else f" with exit code {exit_code}"
    last = " / ".join(lines) if lines else "(it printed nothing)"
    return TrialFailure(
        Cause.PULUMI, f'pulumi up ended{code} and named no error; {fix}. Its last lines: "{last}"'
    )


def _exit_code(error: auto.CommandError) -> int | None:
    """The Pulumi CLI's exit code, which the Automation API keeps only in the error's text (its
    ``CommandResult`` as ``code: N``)."""
    found = re.search(r"^ *code: (-?\d+)$", str(error), re.MULTILINE)
    return int(found.group(1)) if found else None


class TrialRunner:
    """Deploys, measures and destroys trial stacks of one campaign in one project."""

    def __init__(
        self, project: Path, logs: Path, campaign: str, base: str, *, keep_stacks: bool = False
    ) -> None:
        self.project = project
        self.logs = logs
        self.campaign = campaign
        self.base = base
        """The campaign's base stack: where an ssh pool host's key comes from by default."""
        self.keep_stacks = keep_stacks
        """Keep a destroyed trial's stack in the backend and its file in ``stacks/``."""
        self._write_lock = threading.Lock()  # stack creation touches the workspace's settings

    def log_path(self, stack: str) -> Path:
        """Where a trial's Pulumi output goes."""
        return self.logs / f"{stack}.log"

    def _stream(self, stack: str, step: str) -> tuple[Any, list[str]]:
        self.logs.mkdir(parents=True, exist_ok=True)
        handle = self.log_path(stack).open("a", encoding="utf-8")
        handle.write(f"=== pulumi {step} -s {stack}\n")
        lines: list[str] = []

        def write(line: str) -> None:
            lines.append(line)
            handle.write(line if line.endswith("\n") else line + "\n")
            handle.flush()

        return (handle, write), lines

    def deploy(
        self,
        row: PlanRow,
        host: PoolHost,
        overrides: dict[str, Any] | None = None,
        *,
        benchmark_again: bool = False,
    ) -> list[BenchmarkResult]:
        """Write the trial's stack file for ``host`` and ``pulumi up`` it; its benchmark levels.
        ``overrides`` set ``section.field`` keys of the file; ``benchmark_again`` replaces the
        benchmark even when its workload did not change (the second part of an early-stopping
        trial may ask for as many repetitions as the first). Raises ``auto.CommandError`` (see
        ``failure``) when the update fails."""
        sections = bind_host(row.candidate.sections, host)
        for key, value in (overrides or {}).items():
            section, field = key.split(".", 1)
            sections.setdefault(section, {})[field] = value
        labels = ", ".join(f"{k}={v}" for k, v in row.candidate.labels.items())
        header = (
            f"Campaign {self.campaign}, trial {row.stack} on pool host {host.name}: {labels}.\n"
            "Written by `sglang-stacks sweep run`, which removes it once the trial is destroyed "
            "(kept with --keep-trial-stacks: `pulumi up -s <this stack>` deploys it again)."
        )
        with self._write_lock:
            stack = automation.write_stack(self.project, row.stack, sections, header)
            # After the write, which replaces the file's config.
            give_secrets(stack, host, self.base, stacks_dir(self.project))
        replace = [self._benchmark_urn(stack)] if benchmark_again else None
        (handle, write), _ = self._stream(row.stack, "up")
        try:
            # show_secrets=False: the update's summary (unread) without decrypting the config's secrets.
            done = stack.up(
                on_output=write, on_error=write, color="never", replace=replace, show_secrets=False
            )
        finally:
            handle.close()
        outputs: DeploymentOutputs | FleetOutputs | None
        if row.spec is not None and row.spec.fleet is not None:  # through the fleet's router
            outputs = automation.outputs_of(done.outputs, FleetOutputs)
        else:
            outputs = automation.outputs_of(done.outputs, DeploymentOutputs)
        return outputs.levels if outputs else []

    @staticmethod
    def _benchmark_urn(stack: auto.Stack) -> str:
        return next(r.urn for r in resources_of(stack) if r.urn.endswith(f"::{stack.name}-benchmark"))

    def failure(self, stack: str, error: Exception) -> TrialFailure:
        """The classified cause of the last failed update, from the trial's log (or the error, when
        the update never started)."""
        if isinstance(error, StacksError):
            return TrialFailure(error.cause, error.summary)
        if not isinstance(error, auto.CommandError):
            first = (str(error).splitlines() or [""])[0]
            return TrialFailure(
                Cause.DRIVER,
                f"sweep run failed around the update of {stack}, not in it: {type(error).__name__}"
                f"{': ' + first if first else ''}. Fix what it names; if it names nothing of this "
                "machine (a disk, a permission), it is a fault of sglang-stacks: report it with the "
                f"trial's log, {self.log_path(stack)}.",
            )
        text = self.log_path(stack).read_text(encoding="utf-8") if self.log_path(stack).exists() else ""
        last_up = text.rsplit("=== pulumi up", 1)[-1].partition("\n")[2]  # after its header line
        return classify(last_up, exit_code=_exit_code(error), log=str(self.log_path(stack)))

    def settle(self, stack: str) -> list[str]:
        """Bring the stack of a trial whose ``sweep run`` was killed back to nothing: let go of the
        dead update's lock, stop a server its interrupted create had launched (the host's claim
        records it; ``recover``), clear the pending operations, destroy. What was found, in
        sentences. Raises StacksError or ``auto.CommandError`` when that cannot be done."""
        try:
            automation.select_stack(self.project, stack)
        except SpecError:
            return ["its stack is not in the backend (never created, or removed once destroyed)"]
        said = io.StringIO()
        left = recover.recover(stack, project_dir=self.project, out=said)
        (handle, write), _ = self._stream(stack, "recover")
        with handle:
            for line in said.getvalue().splitlines():
                write(line)
        # recover's findings, without the line that names the stack
        found = [
            line.strip().removeprefix("recover: ")
            for line in said.getvalue().splitlines()
            if not line.startswith(f"recover: stack {stack} ")
        ]
        self.destroy(stack, clear_pending=left != ExitCode.OK)
        return found

    def holds(self, stack: str) -> bool:
        """Whether the trial's stack is in this project's backend with resources in its state."""
        try:
            selected = automation.select_stack(self.project, stack)
        except SpecError:
            return False
        return bool(resources_of(selected))

    def destroy(self, stack: str, *, clear_pending: bool = False) -> None:
        """Stop the trial's server and release its host: ``pulumi destroy`` of its stack, until the
        state holds no resource (a destroy cut short by Ctrl-C still exits 0, with the claim left).
        ``clear_pending`` first refreshes away creates a killed update left pending. SpecError
        when the backend has no such stack (nothing was deployed)."""
        try:
            self._destroy(automation.open_stack(self.project, stack), clear_pending)
        except auto.StackNotFoundError:  # opened unchecked: the destroy's own error says so
            raise automation.no_stack(stack) from None

    def _destroy(self, selected: auto.Stack, clear_pending: bool) -> None:
        stack = selected.name
        for _ in range(3):
            (handle, write), _ = self._stream(stack, "destroy")
            try:
                # show_secrets=False: each operation's summary (unread) without decrypting secrets.
                if clear_pending:
                    selected.refresh(
                        clear_pending_creates=True,
                        on_output=write,
                        on_error=write,
                        color="never",
                        show_secrets=False,
                    )
                if self.keep_stacks:
                    selected.destroy(on_output=write, on_error=write, color="never", show_secrets=False)
                elif self._destroy_and_remove(selected, write):
                    return
            finally:
                handle.close()
            if not resources_of(selected):
                if not self.keep_stacks:
                    self._remove(selected)
                return
        raise auto.CommandError(
            auto.CommandResult(stdout="", stderr=f"resources of {stack} survived three destroys", code=1)
        )

    def _destroy_and_remove(self, selected: auto.Stack, write: Callable[[str], None]) -> bool:
        """``pulumi destroy --remove``: the trial's resources destroyed and, when its state then
        holds none, its stack removed from the backend and its file from ``stacks/``, by one CLI
        process (the Automation API's destroy, its summary's read, a read of the state and a
        ``stack rm`` are four). False when resources were left (a destroy cut short by Ctrl-C ends
        without error, and Pulumi then refuses the removal); ``auto.CommandError`` when the destroy
        failed. Ctrl-C reaches the CLI too: cut short once the stack had left the backend, the
        destroy is done, and its file goes as well (as ``_remove`` does)."""
        try:
            automation.pulumi_command(
                selected, "destroy", "--yes", "--skip-preview", "--remove", "--color", "never",
                "--stack", selected.name, on_output=write,
            )  # fmt: skip
        except auto.CommandError as error:
            if REMOVAL_REFUSED in str(error):
                return False
            if isinstance(error, auto.StackNotFoundError) or _in_backend(selected):
                raise
        stack_path(selected.name, stacks_dir(self.project)).unlink(missing_ok=True)  # Pulumi's too
        return True

    def _remove(self, selected: auto.Stack) -> None:
        """Remove a destroyed trial's stack from the backend and its file from ``stacks/``. Ctrl-C
        reaches the ``pulumi stack rm`` too: a removal cut short is tried once more, and the file
        goes whenever the backend no longer has the stack, whatever the CLI's exit said."""
        for attempt in (1, 2):
            try:
                with self._write_lock:  # removing a stack touches the workspace's settings too
                    selected.workspace.remove_stack(selected.name)
                break
            except auto.CommandError as error:
                if not _in_backend(selected):
                    break  # removed before the CLI was cut short
                if attempt == 2:  # an empty stack left over is no reason to fail the trial
                    (handle, write), _ = self._stream(selected.name, "stack rm")
                    with handle:
                        write(f"The empty stack stays in the backend: {error}")
                    return
        stack_path(selected.name, stacks_dir(self.project)).unlink(missing_ok=True)


def _in_backend(selected: auto.Stack) -> bool:
    """Whether the backend still lists the stack (when it cannot be asked: as if it did)."""
    try:
        return selected.name in {summary.name for summary in selected.workspace.list_stacks()}
    except auto.CommandError:
        return True
