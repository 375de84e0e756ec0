"""The search decides whether to split prefill from decode: the two shipped PD campaigns
(``campaigns/pd-long.yaml``, ``campaigns/pd-short.yaml``: the same 24 emulated GPUs aggregated, one
prefill worker to two decode workers, or two to one) run through the real CLI, each trial a fleet
behind SGLang's real router, and their reports pick differently: a disaggregated layout for
4,096-token prompts, aggregated serving for 128-token prompts, each significantly ahead by the
tool's own statistics, with the TTFT and TPOT that say why.

Both campaigns run at once, each on its own pool fleet (moved to free ports and this test's
folders); every trial fleet is destroyed after its benchmark, and the next trial takes the same
hosts and router folder.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._pulumi import ROOT, Workspace, free_port, shipped_stack_config

pytestmark = pytest.mark.integration

CAMPAIGNS = ("pd-long", "pd-short")


def moved_campaign(name: str, folder: Path) -> Path:
    """The shipped campaign ``name`` with its pool fleet on free ports and in ``folder``."""
    document: dict[str, Any] = yaml.safe_load((ROOT / "campaigns" / f"{name}.yaml").read_text())
    fleet = document["pool"][0]["fleet"]
    for index, host in enumerate(fleet["hosts"]):
        host.update(server_port=free_port(), bootstrap_port=free_port(), state_dir=f"{folder}/host{index}")
    fleet["router"] = {"port": free_port(), "metrics_port": free_port(), "state_dir": f"{folder}/router"}
    path = folder / f"{name}.yaml"
    folder.mkdir(parents=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each campaign's report, after both ran side by side in one workspace."""
    tmp = tmp_path_factory.mktemp("pd-campaign")
    workspace = Workspace.create(tmp)
    base = yaml.safe_load(shipped_stack_config("demo-fleet", tmp / "demo-fleet"))
    # Every trial starts three servers: each loads its weights 500 times faster than a real one.
    base["config"]["sglang-stacks:environment"]["emulator"]["time_scale"] = 0.002
    workspace.init_stack("demo-fleet", yaml.safe_dump(base, sort_keys=False))
    files = {name: moved_campaign(name, tmp / name) for name in CAMPAIGNS}
    runs = {
        name: subprocess.Popen(
            workspace.cli_command("sweep", "run", str(path)),
            cwd=workspace.path,
            env=workspace.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, path in files.items()
    }
    for name, run in runs.items():
        said, _ = run.communicate(timeout=900)
        assert run.returncode == 0, f"sweep run {name}:\n{said}"
        assert "3 done, 0 failed" in said, said
    left = workspace.json("stack", "ls", "--json")
    assert [s["name"] for s in left] == ["demo-fleet"], "every trial stack is destroyed and removed"
    found = {}
    for name, path in files.items():
        workspace.cli("sweep", "report", str(path), check=True)
        found[name] = (workspace.path / "reports" / name / "report.md").read_text()
    return found


def ranking(report: str) -> list[dict[str, str]]:
    """The report's ranking table, a row per trial, best first."""
    lines = report.split("## Ranking", 1)[1].strip().splitlines()
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [line for line in lines[2:] if line.startswith("|")]
    return [dict(zip(head, (c.strip() for c in row.strip("|").split("|")), strict=True)) for row in rows]


def test_long_prompts_pick_a_disaggregated_layout_significantly_ahead_of_aggregated(
    reports: dict[str, str],
) -> None:
    rows = ranking(reports["pd-long"])

    assert rows[0]["serving"] in ("1P-2D", "2P-1D")
    aggregated = next(row for row in rows if row["serving"] == "aggregated")
    assert aggregated["verdict"] == "significantly worse"
    assert re.search(r"leads at .* significantly ahead of the runner-up", reports["pd-long"])


def test_short_prompts_pick_aggregated_serving_significantly_ahead_of_every_split(
    reports: dict[str, str],
) -> None:
    rows = ranking(reports["pd-short"])

    assert rows[0]["serving"] == "aggregated"
    assert [row["verdict"] for row in rows[1:]] == ["significantly worse"] * 2
    # Why: a split leaves fewer GPUs decoding and adds the KV transfer before the first token.
    best_ttft = float(rows[0]["TTFT p50 ms"])
    assert all(float(row["TTFT p50 ms"]) > best_ttft for row in rows[1:])
    assert all(row["TPOT p50 ms"] for row in rows)
