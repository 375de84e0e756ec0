"""CPU seconds and CLI processes of the steps a campaign repeats for every trial, and a companion
command for every read, with the real Pulumi CLI and a local backend:

- a finished trial's destroy: ``pulumi destroy --remove`` (now) against the stack check, the
  Automation API's destroy, its summary's read, a read of the state and ``pulumi stack rm``
  (before);
- a read of a stack's outputs: ``pulumi stack output`` alone (now) against a stack check first
  (before).

Each trial stack holds a one-line program's stack resource and one output, so the figures are the
CLI's own cost, not a deployment's. Median (and range) over ``--rounds`` runs, as the ended
children's CPU. Needs the project's Pulumi CLI on PATH (``. .venv/sglang-stacks.env``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpu_time import children_cpu_s

from sglang_stacks.campaign.trial import TrialRunner
from sglang_stacks.drive import _workspace, automation
from sglang_stacks.resources.state import resources_of

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = 'import pulumi\npulumi.export("tok_s", 1.0)\n'


def _project(folder: Path) -> Path:
    project = folder / "project"
    (project / "stacks").mkdir(parents=True)
    (folder / "state").mkdir()
    (project / "Pulumi.yaml").write_text(
        f"name: trial-cli\nruntime:\n  name: python\n  options:\n    virtualenv: {ROOT / '.venv'}\n"
        "stackConfigDir: stacks\n"
    )
    (project / "__main__.py").write_text(PROGRAM)
    os.environ.update(
        PULUMI_BACKEND_URL=f"file://{folder / 'state'}",
        PULUMI_CONFIG_PASSPHRASE="benchmark",
        PULUMI_SKIP_UPDATE_CHECK="true",
    )
    return project


class Counted:
    """How many CLI processes the workspace's command runner starts."""

    def __init__(self) -> None:
        self.processes = 0
        real = _workspace.Command.run

        def run(command: _workspace.Command, *args: object, **kwargs: object) -> object:
            self.processes += 1
            return real(command, *args, **kwargs)  # type: ignore[arg-type]

        _workspace.Command.run = run  # type: ignore[method-assign,assignment]


def _destroy_before(project: Path, stack: str) -> None:
    selected = automation.select_stack(project, stack)
    selected.destroy(color="never", show_secrets=False)
    assert not resources_of(selected)
    selected.workspace.remove_stack(stack)


def _read_before(project: Path, stack: str) -> None:
    automation.select_stack(project, stack).outputs()


def _measure(
    project: Path, counted: Counted, rounds: int, step: Callable[[str], object], *, deployed: bool
) -> tuple[list[float], int]:
    figures, processes = [], 0
    for index in range(rounds):
        stack = f"trial-{index}"
        created = automation.write_stack(project, stack, {}, "a benchmark's trial")
        if deployed:
            created.up(color="never", show_secrets=False)
        counted.processes = 0
        before = children_cpu_s()
        step(stack)
        figures.append(children_cpu_s() - before)
        processes = counted.processes
        if not deployed:
            created.workspace.remove_stack(stack)
    return figures, processes


def _row(name: str, measured: tuple[list[float], int]) -> str:
    figures, processes = measured
    return (
        f"| {name} | {processes} | {statistics.median(figures):.2f} ({min(figures):.2f}-{max(figures):.2f}) |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    rows = ["| step | CLI processes | CPU (s), median (range) |", "| --- | ---: | --- |"]
    with tempfile.TemporaryDirectory() as folder:
        project = _project(Path(folder))
        counted = Counted()
        runner = TrialRunner(project, Path(folder) / "logs", "benchmark", "base")
        now = _measure(project, counted, args.rounds, runner.destroy, deployed=True)
        before = _measure(project, counted, args.rounds, lambda s: _destroy_before(project, s), deployed=True)
        rows.append(_row("a trial's destroy and removal (now)", now))
        rows.append(_row("a trial's destroy and removal (before)", before))
        read_now = _measure(
            project, counted, args.rounds, lambda s: automation.stack_outputs(s, project), deployed=False
        )
        read_before = _measure(
            project,
            counted,
            args.rounds,
            lambda s: _read_before(project, s),
            deployed=False,
        )
        rows.append(_row("a read of a stack's outputs (now)", read_now))
        rows.append(_row("a read of a stack's outputs (before)", read_before))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
