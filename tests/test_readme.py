"""The README as a newcomer follows it: its command blocks run on the emulator, in order, and every
number it promises for them is what they print, parsed from their output and compared with the
tolerance the tool's own statistics give (a README number is "about" a measured mean: it must lie
within the 95 % interval the tool prints or computes, widened by the README's own rounding).

The shipped stack files are used as they are, with only what ties them to one machine moved to
the test's own (the host's state folder, the server's port, the emulated GPUs, the draft model's
folder) and fewer repetitions of the same requests (one request each, of the shipped prompt and
output lengths, so each repetition's tok/s is what the shipped benchmark measures). The blocks
share one workspace and one emulator host, and run in the README's order; the other blocks'
numbers are checked where their deployments already are (tests/test_fleet_demo.py).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_stacks.results import history
from sglang_stacks.results.outputs import DeploymentOutputs
from sglang_stacks.results.stats import compare_runs
from tests._pulumi import ROOT, Workspace, free_port

pytestmark = pytest.mark.integration

README = (ROOT / "README.md").read_text(encoding="utf-8")
WALKED = ("baseline", "baseline-bs128", "eagle3-bs128")
"""The shipped stacks the walked blocks deploy."""
REPETITIONS = 3


def section(title: str) -> str:
    """The README's text under ``## title`` (or ``### title``), up to the next heading of its level."""
    found = re.search(rf"^(#+) {re.escape(title)}\n(.*?)(?=^\1 |\Z)", README, re.MULTILINE | re.DOTALL)
    assert found, f"the README has no section {title!r}"
    return found.group(2)


@dataclass(frozen=True)
class Line:
    """A command of a README block and the comment beside it (continued on the lines below)."""

    command: str
    comment: str


def commands(text: str) -> list[Line]:
    """The commands of the ``sh`` blocks of ``text``, in order."""
    found: list[Line] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        for raw in block.splitlines():
            command, _, comment = raw.partition("#")
            if command.strip():
                found.append(Line(command.strip(), comment.strip()))
            elif found and comment.strip() and raw.startswith(" "):
                found[-1] = Line(found[-1].command, f"{found[-1].comment} {comment.strip()}")
    return found


def about(text: str, pattern: str) -> float:
    """The number ``pattern`` (one group) finds in ``text``."""
    found = re.search(pattern, text)
    assert found, f"{pattern!r} is not in {text!r}"
    return float(found.group(1))


def within(promised: float, interval: tuple[float, float], said: str) -> None:
    """``promised``, rounded as the README writes it, lies within the measured ``interval``."""
    decimals = len(said.split(".")[1]) if "." in said else 0
    rounding = 0.5 * 10**-decimals
    low, high = sorted(interval)
    assert low - rounding <= promised <= high + rounding, (
        f"the README says {said}; measured {low:.2f} to {high:.2f}"
    )


def _local(stack: str, tmp: Path, port: int) -> str:
    """The shipped stack file's config, tied to this test's host, with fewer repetitions."""
    document = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"))
    config: dict[str, Any] = document["config"]
    config["sglang-stacks:host"]["state_dir"] = str(tmp / "host")
    config["sglang-stacks:server"]["port"] = port
    emulator = config["sglang-stacks:environment"].setdefault("emulator", {})
    emulator["state_dir"] = str(tmp / "gpus")
    if "sglang-stacks:draftModel" in config:
        config["sglang-stacks:draftModel"]["path_on_host"] = str(tmp / "eagle3")
    config["sglang-stacks:benchmark"].update(repetitions=REPETITIONS, requests_per_repetition=1)
    text: str = yaml.safe_dump({"config": config}, sort_keys=False)
    return text


@dataclass
class Walk:
    """The README's commands as run, each with its exit code and what it printed."""

    workspace: Workspace
    history: Path
    said: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """Runs a README command as a script does (``pulumi up --yes``, as the README says)."""
        words = shlex.split(command)
        if words[0] == "pulumi":
            args = words[1:]
            if args[0] in ("up", "destroy"):
                args.insert(1, "--yes")
            done = self.workspace.run(*args, check=False, timeout_s=1200)
        else:
            assert words[0] == "sglang-stacks", command
            done = self.workspace.cli(*words[1:], timeout_s=1200)
        self.said[command] = done
        return done

    def tok_s_runs(self, stack: str) -> list[float]:
        """The tok/s of each repetition of the stack's last benchmark, from its outputs."""
        return list(DeploymentOutputs.model_validate(self.workspace.outputs(stack)).benchmark.tok_s_runs)


def change_interval(runs: list[float], reference: list[float]) -> tuple[float, float]:
    """The 95 % interval of the change of ``runs`` against ``reference``, in percent of the
    reference's mean, as compare and the gate judge it (Welch's, with the floor between launches)."""
    interval = compare_runs(runs, reference).change_ci95_pct
    assert interval is not None
    return interval


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    tmp = tmp_path_factory.mktemp("readme")
    workspace = Workspace.create(tmp)
    workspace.extra_env[history.ENV_VAR] = str(tmp / "history.sqlite")
    port = free_port()
    for stack in WALKED:
        workspace.init_stack(stack, _local(stack, tmp, port))
    yield Walk(workspace, tmp / "history.sqlite")
    for stack in WALKED:
        workspace.run("destroy", "--yes", "--skip-preview", "-s", stack, check=False)


def test_the_three_uses_run_as_written_and_print_what_the_readme_says(walk: Walk) -> None:
    lines = commands(section("The three uses, on the emulator").split("Within one stack", 1)[0])
    assert [line.command for line in lines][:2] == [". scripts/env.sh", "pulumi up -s baseline"]
    compared: tuple[list[float], list[float]] | None = None
    for line in lines[1:]:
        if line.command.endswith(" -f"):
            continue  # followed until Ctrl-C: tests/test_engine_status.py follows one
        done = walk.run(line.command)
        said = done.stdout + done.stderr
        promised = re.search(r"exit code (\d)", line.comment)
        assert done.returncode == (int(promised.group(1)) if promised else 0), (line.command, said)
        if line.command.startswith("sglang-stacks compare"):
            # "about N % slower, significant": within the change's interval; compare says so too
            compared = (walk.tok_s_runs("eagle3-bs128"), walk.tok_s_runs("baseline"))
            said_pct = re.search(r"about ([\d.]+) % slower, significant", line.comment)
            assert said_pct, line.comment
            within(-float(said_pct.group(1)), change_interval(*compared), said_pct.group(1))
            assert re.search(r"eagle3-bs128 is [\d.]+ % slower than baseline \(significant, ", said), said
        if line.command.startswith("sglang-stacks rollout"):
            # "about N % slower than baseline: baseline serves again", as the gate judged it: the
            # candidate's new result against baseline's last one before it
            said_pct = re.search(
                r"about ([\d.]+) % slower than baseline: baseline serves again", line.comment
            )
            assert said_pct, line.comment
            rows = history.rows(walk.history)
            judged = max((row for row in rows if row.stack == "eagle3-bs128"), key=lambda row: row.id)
            reference = max(
                (row for row in rows if row.stack == "baseline" and row.id < judged.id),
                key=lambda row: row.id,
            )
            interval = change_interval(list(judged.result.tok_s_runs), list(reference.result.tok_s_runs))
            within(-float(said_pct.group(1)), interval, said_pct.group(1))
            assert "rollout: baseline serves again" in said, said
    assert compared is not None
    # The preview's flag diff, as the README shows it (the draft model's folder is this test's).
    shown = re.findall(r"^ +([~+-] --\S+.*)$", section("The three uses, on the emulator"), re.MULTILINE)
    assert shown, "the README shows the preview's flag diff"
    previewed = walk.said["pulumi preview --diff -s eagle3-bs128"]
    preview = previewed.stdout + previewed.stderr  # the diff display writes diagnostics to stderr
    for flag in shown:
        expected = flag if "draft-model-path" not in flag else flag.rsplit(" ", 1)[0]
        assert expected in preview, (expected, preview)


def test_a_change_inside_a_deployed_stack_previews_flag_by_flag(walk: Walk) -> None:
    lines = commands(section("The three uses, on the emulator").split("Within one stack", 1)[1])
    assert lines[0].command == "pulumi up -s baseline-bs128", lines  # deployed first, as the README says
    for line in lines:
        done = walk.run(line.command)
        assert done.returncode == 0, done.stdout + done.stderr
    previewed = next(line.command for line in lines if line.command.startswith("pulumi preview"))
    preview = walk.said[previewed].stdout
    assert re.search(r"~ cuda_graph_max_bs\s*: 128 => 512", preview), preview
    assert re.search(r"\+-\s*pulumi-python:dynamic/sglang:Server", preview), preview  # replaced


def test_the_stacks_table_gives_each_deployed_stacks_tok_s_as_measured(walk: Walk) -> None:
    table = section("Stacks")
    rows = {
        stack: next(line for line in table.splitlines() if line.startswith(f"| `{stack}` |"))
        for stack in WALKED
    }
    for stack, row in rows.items():
        said = re.search(r"about ([\d.]+) tok/s", row.split("|")[3])
        assert said, row
        low, high = DeploymentOutputs.model_validate(walk.workspace.outputs(stack)).benchmark.tok_s_ci95
        within(float(said.group(1)), (low, high), said.group(1))
    eagle = rows["eagle3-bs128"]
    against_baseline = re.search(r"`baseline` says about -([\d.]+) %, significant", eagle)
    against_bs128 = re.search(r"about -([\d.]+) % against `baseline-bs128`", eagle)
    assert against_baseline and against_bs128, eagle
    three_uses = commands(section("The three uses, on the emulator"))
    compare = next(line for line in three_uses if line.command.startswith("sglang-stacks compare"))
    assert f"about {against_baseline.group(1)} % slower" in compare.comment  # the table and the block agree
    interval = change_interval(walk.tok_s_runs("eagle3-bs128"), walk.tok_s_runs("baseline-bs128"))
    within(-float(against_bs128.group(1)), interval, against_bs128.group(1))


def test_the_doomed_stacks_numbers_are_the_memory_plans() -> None:
    row = next(line for line in section("Stacks").splitlines() if line.startswith("| `eagle3-auto-mem` |"))
    render = next(line for line in commands(section("See a stack's launch command without deploying")))
    assert render.command.startswith("sglang-stacks render")
    done = subprocess.run(
        [sys.executable, "-m", "sglang_stacks.cli", "render", "eagle3-auto-mem", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    plan = json.loads(done.stdout)["memory"]

    assert done.returncode == 1 and plan["verdict"] == "does_not_fit"
    assert about(row, r"([\d.]+) GB of weights") == plan["target_weights_gb"]
    assert about(row, r"no KV cache at ([\d.]+)") == round(plan["mem_fraction_static"], 2)
    assert about(row, r"fits from ([\d.]+)") == plan["smallest_fitting_fraction"]


@pytest.mark.parametrize("campaign", ["quick", "seeds"])
def test_the_campaigns_plans_count_what_the_readme_says(campaign: str) -> None:
    line = next(
        line
        for line in commands(section("Campaigns"))
        if line.command == f"sglang-stacks sweep plan {campaign}"
    )
    said = re.search(r"(\d+) candidates: (\d+) discarded .*?, (\d+) kept", line.comment)
    assert said, line.comment
    done = subprocess.run(
        [sys.executable, "-m", "sglang_stacks.cli", "sweep", "plan", campaign],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    printed = re.search(
        r"^(\d+) candidates: (\d+) kept, (\d+) discarded by preflight", done.stdout, re.MULTILINE
    )
    assert printed, done.stdout
    assert (said.group(1), said.group(2), said.group(3)) == (
        printed.group(1),
        printed.group(3),
        printed.group(2),
    )


def test_the_scripts_say_the_first_run_costs_the_readme_gives() -> None:
    """What a build says it will take, as it starts, is the README's cost table: a newcomer reading
    either expects the same wait."""
    table = section("The two commands").split("What it costs", 1)[1]
    bootstrap = next(line for line in table.splitlines() if line.startswith("| `scripts/bootstrap.sh`"))
    provider = next(line for line in table.splitlines() if line.startswith("| pulumi-kubernetes's provider"))
    said = {
        "venv": (ROOT / "scripts" / "bootstrap.sh", about(bootstrap, r"venv about (\d+)")),
        "CLI": (ROOT / "scripts" / "bootstrap.sh", about(bootstrap, r"CLI about (\d+)")),
        "provider": (ROOT / "scripts" / "ensure-k8s-provider.sh", about(provider, r"\| (\d+) min")),
    }
    for what, (script, minutes) in said.items():
        assert f"(about {minutes:g} minutes" in script.read_text(encoding="utf-8"), (what, minutes, script)
