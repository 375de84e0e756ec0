"""The campaign's decision end to end on the emulator, through the real Pulumi CLI: baseline and
EAGLE-3 deployed and benchmarked, compared, kept in the history and plotted, an EAGLE-3 update
stopped by the regression gate, its rollout handing the host back to baseline, and the winner
promoted.

The tests share one workspace and run in file order: each step is what a user does next.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sglang_stacks.results import history
from tests._pulumi import Workspace, emulator_stack, free_port
from tests.test_deployment import emulator_pids, resources, server_pid

pytestmark = pytest.mark.integration

PROMOTED_FLAGS = {
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
    "mem_fraction_static",
}
"""The launch flags (by canonical name) in which eagle3-bs128 differs from baseline (both at bs 128)."""
SLO = "    slo:\n      tpot_ms: 15\n"
"""The goodput objective of every stack here: baseline decodes a token every 11.2 ms, EAGLE-3 every
18.5 ms on average (54 tok/s), so only baseline's requests meet it."""


@dataclass(frozen=True)
class Campaign:
    """One workspace whose stacks all deploy to one emulator host on one port."""

    workspace: Workspace
    tmp: Path
    port: int
    history_path: Path

    def stack_config(self, *, eagle3: bool, gate: str = "") -> str:
        if not eagle3:
            return emulator_stack(port=self.port, state_dir=self.tmp, benchmark=SLO, extra=gate)
        return emulator_stack(
            port=self.port,
            state_dir=self.tmp,
            benchmark=SLO,
            draft=(
                "  sglang-stacks:draftModel:\n"
                "    source: local\n"
                "    local_path: artifacts/eagle3-standin\n"
                f"    path_on_host: {self.tmp}/eagle3/output_100k_sglang/4\n"
                "    weights_gb: 2.4\n"
            ),
            server=(
                "    cuda_graph_max_bs: 128\n"
                "    mem_fraction_static: 0.88\n"
                "    speculative_algorithm: EAGLE\n"
                "    speculative_num_steps: 2\n"
                "    speculative_eagle_topk: 4\n"
                "    speculative_num_draft_tokens: 4\n"
            ),
            extra=gate,
        )

    def cli(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        """`sglang-stacks <args>` from the workspace folder, as a user runs it there."""
        return self.workspace.cli(*args, timeout_s=timeout_s)

    def claim_owner(self) -> str:
        claim: dict[str, Any] = json.loads((self.tmp / "host" / "claim.json").read_text())
        return str(claim["stack"])


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    """baseline (bs128) and eagle3-bs128 deployed one after the other; eagle3-bs128 holds the host."""
    tmp = tmp_path_factory.mktemp("campaign")
    workspace = Workspace.create(tmp)
    history_path = tmp / "history.sqlite"
    workspace.extra_env[history.ENV_VAR] = str(history_path)
    found = Campaign(workspace, tmp, free_port(), history_path)
    workspace.init_stack("baseline", found.stack_config(eagle3=False))
    workspace.init_stack("eagle3-bs128", found.stack_config(eagle3=True))
    workspace.run("up", "--yes", "-s", "baseline")
    workspace.run("up", "--yes", "-s", "eagle3-bs128")
    yield found
    for stack in ("eagle3-gated", "eagle3-bs128", "baseline"):
        workspace.run("destroy", "--yes", "-s", stack, check=False)


def test_eagle3_took_the_host_over_and_a_refresh_of_baseline_sees_who_holds_it(campaign: Campaign) -> None:
    """The suite's one drill of the EAGLE-3 change taking the host over (the rollback is the
    rollout's, below; the README walk runs the same steps as a user types them)."""
    eagle3_pid = server_pid(campaign.workspace, "eagle3-bs128")
    assert emulator_pids(campaign.port) == [eagle3_pid]  # baseline's server was stopped first
    assert campaign.claim_owner() == "eagle3-bs128"
    outputs = campaign.workspace.outputs("eagle3-bs128")
    assert 45 < outputs["tok_s"] < 65
    assert outputs["benchmark"]["accept_length"] > 1
    assert (campaign.tmp / "eagle3" / "output_100k_sglang" / "4" / "config.json").exists()

    campaign.workspace.run("refresh", "--yes", "-s", "baseline")

    seen = resources(campaign.workspace, "baseline")
    assert "baseline-server" not in seen
    assert seen["baseline-claim"]["owner"] == "eagle3-bs128"


def test_compare_reports_eagle3_about_40_percent_slower(campaign: Campaign) -> None:
    shown = campaign.cli("compare", "baseline", "eagle3-bs128")

    assert shown.returncode == 1, shown.stdout + shown.stderr  # slower beyond the 0 % tolerance
    lines = shown.stdout.splitlines()
    draft_path = f"{campaign.tmp}/eagle3/output_100k_sglang/4"
    expected_rows = {
        "--speculative-algorithm": ("-", "EAGLE"),
        "--speculative-num-steps": ("-", "2"),
        "--speculative-eagle-topk": ("-", "4"),
        "--speculative-num-draft-tokens": ("-", "4"),
        "--mem-fraction-static": ("-", "0.88"),
        "--speculative-draft-model-path": ("-", draft_path),
    }
    for flag, (baseline_cell, eagle3_cell) in expected_rows.items():
        row = next(line for line in lines if line.startswith(flag + " "))
        assert row.split() == [flag, baseline_cell, eagle3_cell]
    assert not any(line.startswith("--cuda-graph-max-bs") for line in lines)  # equal, so not shown
    tok_s = next(line for line in lines if line.startswith("tok/s "))
    change = float(re.search(r"\(([-+]\d+\.\d) %\)", tok_s).group(1))  # type: ignore[union-attr]
    assert -45 < change < -33
    verdict = lines[-1]
    assert verdict.startswith("eagle3-bs128 is ") and "slower than baseline" in verdict
    assert "(significant" in verdict

    as_json = campaign.cli("compare", "baseline", "eagle3-bs128", "--json")
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    (eagle3,) = document["verdicts"]
    assert eagle3["stack"] == "eagle3-bs128" and eagle3["significant"] is True
    assert -45 < eagle3["change_pct"] < -33
    options = {"--" + flag.replace("_", "-") for flag in PROMOTED_FLAGS}
    assert {row["flag"] for row in document["flags"]} == options

    tolerant = campaign.cli("compare", "baseline", "eagle3-bs128", "--tolerance-pct", "50")
    assert tolerant.returncode == 0


def test_a_goodput_objective_shows_as_an_output_and_in_compare(campaign: Campaign) -> None:
    baseline = campaign.workspace.outputs("baseline")
    eagle3 = campaign.workspace.outputs("eagle3-bs128")

    for outputs in (baseline, eagle3):
        assert outputs["goodput"]["slo"] == {"tpot_ms": 15}
        assert outputs["goodput"] == outputs["benchmark"]["goodput"]
    # Loaded machines only slow tokens down: baseline's requests can miss, EAGLE-3's never meet it.
    assert 0 < baseline["goodput"]["pct"] <= 100
    assert 0 < baseline["goodput"]["tok_s"] <= baseline["benchmark"]["tok_s_mean"]
    assert eagle3["goodput"]["pct"] == 0 and eagle3["goodput"]["tok_s"] == 0
    shown = campaign.cli("compare", "baseline", "eagle3-bs128")
    cells = [line.split() for line in shown.stdout.splitlines()]
    rows = {" ".join(row[:2]): row[2:] for row in cells if row[:1] == ["goodput"]}
    assert float(rows["goodput tok/s"][0]) == pytest.approx(baseline["goodput"]["tok_s"], abs=0.1)
    assert rows["goodput tok/s"][1:] == ["0.00", "(-100.0", "%)"]
    assert float(rows["goodput req/s"][1]) == 0


def test_compare_names_a_stack_that_is_not_deployed(campaign: Campaign) -> None:
    campaign.workspace.init_stack("eagle3-draft", campaign.stack_config(eagle3=True))

    never_up = campaign.cli("compare", "baseline", "eagle3-draft")
    unknown = campaign.cli("compare", "baseline", "eagle3-typo")

    assert never_up.returncode == 2
    assert "Stack 'eagle3-draft' has no outputs" in never_up.stderr
    assert "`pulumi up -s eagle3-draft`" in never_up.stderr
    assert unknown.returncode == 2
    assert "eagle3-typo" in unknown.stderr and "pulumi stack ls" in unknown.stderr


def test_history_lists_both_stacks_and_plots_them(campaign: Campaign) -> None:
    shown = campaign.cli("history")

    assert shown.returncode == 0, shown.stderr
    stacks = [line.split()[2] for line in shown.stdout.splitlines()[1:] if line.strip()]
    assert stacks == ["baseline", "eagle3-bs128"]
    plot = campaign.tmp / "history.png"
    plotted = campaign.cli("history", "--plot", str(plot))
    assert plotted.returncode == 0, plotted.stderr
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert plot.stat().st_size > 2000


def test_gate_fails_an_eagle3_update_with_both_numbers(campaign: Campaign) -> None:
    gate = "  sglang-stacks:gate:\n    baseline_stack: baseline\n    tolerance_pct: 5\n"
    campaign.workspace.init_stack("eagle3-gated", campaign.stack_config(eagle3=True, gate=gate))

    up = campaign.workspace.run("up", "--yes", "-s", "eagle3-gated", check=False)

    assert up.returncode != 0
    candidate = history.latest(campaign.history_path, "eagle3-gated")
    baseline = history.latest(campaign.history_path, "baseline")
    assert candidate is not None and baseline is not None
    output = up.stdout + up.stderr
    assert f"ran at {candidate.result.tok_s_mean:.1f} tok/s" in output
    assert f"baseline's {baseline.result.tok_s_mean:.1f} tok/s" in output
    assert "beyond the 5 % tolerance" in output
    assert campaign.claim_owner() == "eagle3-gated"  # failing alone hands nothing back


def test_rollout_hands_the_host_back_to_baseline(campaign: Campaign) -> None:
    campaign.workspace.run("config", "set", "--path", "gate.on_regression", "hand_back", "-s", "eagle3-gated")
    baseline_runs = len(history.rows(campaign.history_path, ["baseline"]))

    rolled = campaign.cli("rollout", "eagle3-gated", timeout_s=900)

    assert rolled.returncode == 1, rolled.stdout + rolled.stderr
    lines = rolled.stdout.splitlines()
    candidate = history.latest(campaign.history_path, "eagle3-gated")
    assert candidate is not None
    # Pulumi's output streams through, the update of eagle3-gated first, then baseline's.
    assert lines.index("rollout: pulumi up -s eagle3-gated") < lines.index("rollout: pulumi up -s baseline")
    assert "Updating (eagle3-gated)" in rolled.stdout and "Updating (baseline)" in rolled.stdout
    assert "`sglang-stacks rollout eagle3-gated`" in rolled.stdout  # the provider's error, as Pulumi shows it
    # The gate's error says the measurements once, as Pulumi shows it; the rollout refers to it.
    verdicts = [line for line in lines if "slower than baseline's" in line]
    assert len(verdicts) == 1, verdicts
    assert f"ran at {candidate.result.tok_s_mean:.1f} tok/s" in verdicts[0]
    assert "beyond the 5 % tolerance" in verdicts[0]
    assert "rollout: eagle3-gated regressed, as its gate's error above says." in lines
    assert "sglang-stacks-failure:" not in rolled.stdout + rolled.stderr
    # Both results: baseline benchmarked anew, and the candidate's, whose update stays failed.
    assert len(history.rows(campaign.history_path, ["baseline"])) == baseline_runs + 1
    baseline_tok_s = campaign.workspace.outputs("baseline")["tok_s"]
    assert lines[-1] == (
        f"rollout: baseline serves again at {baseline_tok_s:.1f} tok/s; eagle3-gated ran at "
        f"{candidate.result.tok_s_mean:.1f} tok/s and its update stays failed."
    )
    assert campaign.claim_owner() == "baseline"
    with urllib.request.urlopen(f"http://127.0.0.1:{campaign.port}/health", timeout=10) as reply:
        assert reply.status == 200
    served = urllib.request.Request(
        f"http://127.0.0.1:{campaign.port}/generate",
        data=json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 4}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(served, timeout=30) as reply:
        assert reply.status == 200
        assert "spec_verify_ct" not in json.loads(reply.read()).get("meta_info", {})


def test_promote_then_preview_shows_exactly_the_promoted_flags(campaign: Campaign) -> None:
    stacks_dir = campaign.workspace.path / "stacks"
    promoted = campaign.cli("promote", "eagle3-bs128", "baseline", "--yes", "--stacks-dir", str(stacks_dir))
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert "+    speculative_algorithm: EAGLE" in promoted.stdout

    preview = campaign.workspace.json("preview", "--diff", "--json", "-s", "baseline")

    server = next(
        step
        for step in preview["steps"]
        if step["urn"].endswith("::baseline-server") and step["op"] != "refresh"
    )
    assert server["op"] == "replace"
    assert "flags" in server["replaceReasons"]
    old_flags = server["oldState"]["inputs"]["flags"]
    new_flags = server["newState"]["inputs"]["flags"]
    changed = {flag for flag in {*old_flags, *new_flags} if old_flags.get(flag) != new_flags.get(flag)}
    assert changed == PROMOTED_FLAGS
    assert new_flags["speculative_algorithm"] == "EAGLE"
    assert new_flags["mem_fraction_static"] == 0.88
    draft = [step for step in preview["steps"] if step["urn"].endswith("::baseline-draft-model")]
    assert [step["op"] for step in draft] == ["create"]


def test_a_gate_with_room_lets_the_rollout_through(campaign: Campaign) -> None:
    campaign.workspace.run("config", "set", "--path", "gate.tolerance_pct", "50", "-s", "eagle3-gated")

    rolled = campaign.cli("rollout", "eagle3-gated", timeout_s=900)

    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    outputs = campaign.workspace.outputs("eagle3-gated")
    assert 45 < outputs["tok_s"] < 62
    assert rolled.stdout.splitlines()[-1] == (
        f"rollout: eagle3-gated is up at {outputs['tok_s']:.1f} tok/s, past its gate against baseline."
    )
    assert "pulumi up -s baseline" not in rolled.stdout
    assert campaign.claim_owner() == "eagle3-gated"
    # Destroying a stack that lost the host stops nothing of the one that holds it.
    serving = server_pid(campaign.workspace, "eagle3-gated")
    campaign.workspace.run("destroy", "--yes", "-s", "eagle3-bs128")
    assert emulator_pids(campaign.port) == [serving]
    assert campaign.claim_owner() == "eagle3-gated"
