"""Campaign files and plans without any host: the shipped campaign's plan through the real CLI,
errors that name the key, axes expansion, and the ranking's honesty about noise."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.axes import apply
from sglang_stacks.campaign.keys import check_pool_keys
from sglang_stacks.campaign.limits import check_pool_answers
from sglang_stacks.campaign.model import campaign_json_schema, load_campaign
from sglang_stacks.campaign.model_goals import ObjectiveSpec
from sglang_stacks.campaign.plan import Plan, make_plan
from sglang_stacks.campaign.rank import rank
from sglang_stacks.config.spec import EMULATOR_HOST_FACTS
from sglang_stacks.errors import SpecError
from sglang_stacks.results.stats import BenchmarkResult
from tests._pulumi import Workspace, emulator_stack

ROOT = Path(__file__).resolve().parent.parent
POOL = """
pool:
  - {name: a, host: {kind: emulator, state_dir: /tmp/a}, port: 30001}
"""


def _plan_output() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "sglang_stacks.cli", "sweep", "plan", "seeds"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


def test_the_shipped_campaign_plan_discards_eagle3_at_the_automatic_fraction_and_keeps_the_rest() -> None:
    lines = _plan_output().splitlines()

    rows = [line.split() for line in lines if line.startswith("seeds-")]
    assert len(rows) == 72
    discarded = [row for row in rows if row[5] == "discarded"]
    assert len(discarded) == 18
    assert all(row[2] == "auto" and row[3].startswith("eagle3") for row in discarded)
    assert all(row[6] == "memory-does-not-fit:" for row in discarded)
    kept_with_kernel = [row for row in rows if row[5] == "kept" and row[4] == "false"]
    assert all("pcie-custom-all-reduce" in row for row in kept_with_kernel)
    assert "72 candidates: 54 kept, 18 discarded by preflight. Nothing was launched" in lines[-1]
    assert not (ROOT / "reports" / "seeds" / "sweep.json").exists()


def test_an_unknown_key_is_named_with_the_nearest_allowed_one(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("base: baseline\naxes:\n  - {key: server.cuda_graph_max_bs, valuse: [1]}\n" + POOL)

    with pytest.raises(
        SpecError, match=r"axes\.0\.valuse: unknown key\. Remove it or rename it: did you mean values\?"
    ):
        load_campaign(path)


def test_a_zip_of_unequal_lists_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "base: baseline\naxes:\n  - name: spec\n    zip: {server.speculative_num_steps: [1, 2], "
        "server.speculative_eagle_topk: [1]}\n" + POOL
    )

    with pytest.raises(SpecError, match=r"axes\.0: zip needs .* every list of the same, non-zero length"):
        load_campaign(path)


def test_two_hosts_on_one_port_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "base: baseline\naxes:\n  - {key: server.cuda_graph_max_bs, values: [128]}\n"
        + POOL
        + "  - {name: b, host: {kind: emulator, state_dir: /tmp/b}, port: 30001}\n"
    )

    with pytest.raises(SpecError, match="two pool hosts share a host and port; give each its own port"):
        load_campaign(path)


def test_an_early_stop_that_leaves_no_repetition_to_stop_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "base: baseline\naxes:\n  - {key: server.cuda_graph_max_bs, values: [128]}\n"
        "workload: {repetitions: 3}\nearly_stop: {after_repetitions: 3}\n" + POOL
    )

    with pytest.raises(SpecError, match=r"early_stop\.after_repetitions 3 leaves nothing to stop"):
        load_campaign(path)


def test_an_ssh_key_stack_on_an_emulator_pool_host_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "base: baseline\naxes:\n  - {key: server.cuda_graph_max_bs, values: [128]}\npool:\n"
        "  - {name: a, host: {kind: emulator}, ssh_key_stack: gpu-box}\n"
    )

    with pytest.raises(SpecError, match=r"pool\.0: ssh_key_stack applies to a host of kind: ssh only"):
        load_campaign(path)


def _ssh_campaign(tmp_path: Path, key_stack: str = "") -> Path:
    facts = ", ".join(f"{key}: {json.dumps(value)}" for key, value in EMULATOR_HOST_FACTS.items())
    path = tmp_path / "remote.yaml"
    path.write_text(
        "base: base\naxes:\n  - {key: server.cuda_graph_max_bs, values: [128]}\npool:\n"
        f"  - name: gpu-a\n    host: {{kind: ssh, address: gpu-a, user: ubuntu, {facts}, "
        "host_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHb3}\n"
        + (f"    ssh_key_stack: {key_stack}\n" if key_stack else "")
    )
    return path


def test_an_ssh_pool_host_whose_key_stack_has_no_key_is_refused_with_the_command_that_sets_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "Pulumi.base.yaml").write_text("config:\n  sglang-stacks:server: {tp_size: 8}\n")
    campaign = load_campaign(_ssh_campaign(tmp_path))

    with pytest.raises(SpecError) as error:
        check_pool_keys(campaign, tmp_path)

    message = str(error.value)
    assert message.startswith("pool.0.ssh_key_stack (default: base) is 'base', whose stack file has no")
    assert "`pulumi config set --secret sshPrivateKey -s base < ~/.ssh/id_ed25519`" in message


def test_an_ssh_pool_host_takes_its_key_from_the_stack_it_names(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.base.yaml").write_text("config:\n  sglang-stacks:server: {tp_size: 8}\n")
    (tmp_path / "Pulumi.gpu-box.yaml").write_text(
        "config:\n  sglang-stacks:sshPrivateKey:\n    secure: v1:bm9uY2U=:Y2lwaGVy\n"
    )

    check_pool_keys(load_campaign(_ssh_campaign(tmp_path, key_stack="gpu-box")), tmp_path)
    with pytest.raises(SpecError, match=r"pool\.0\.ssh_key_stack names stack 'nowhere', which cannot"):
        check_pool_keys(load_campaign(_ssh_campaign(tmp_path, key_stack="nowhere")), tmp_path)


def _axes_plan(tmp_path: Path, axes: str) -> Plan:
    (tmp_path / "Pulumi.base.yaml").write_text(emulator_stack(port=30000, state_dir=tmp_path))
    path = tmp_path / "keys.yaml"
    path.write_text("base: base\naxes:\n" + axes + POOL)
    return make_plan("keys", load_campaign(path), tmp_path)


def _axes_refused(tmp_path: Path, axes: str) -> str:
    """What planning a campaign with ``axes`` is refused with."""
    with pytest.raises(SpecError) as error:
        _axes_plan(tmp_path, axes)
    return str(error.value)


def test_an_axis_key_no_stack_has_is_refused_with_the_nearest_valid_name(tmp_path: Path) -> None:
    # It was accepted: every candidate was discarded by preflight as an invalid stack, a study was
    # made and the sweep exited 0.
    message = _axes_refused(
        tmp_path,
        "  - {key: server.cuda_graf_max_bs, values: [128, 256]}\n"
        "  - name: spec\n"
        "    zip: {server.speculative_num_steps: [1, 2], environment.emulatr.time_scale: [1, 2]}\n",
    )

    assert (
        "axes.0.key server.cuda_graf_max_bs: the server section has no key 'cuda_graf_max_bs'; did you mean "
        "server.cuda_graph_max_bs?" in message
    )
    assert (
        "axes.1.zip environment.emulatr.time_scale: the environment section has no key 'emulatr'" in message
    )
    assert "did you mean environment.emulator?" in message
    assert "nothing was created" in message


def test_an_extra_flag_the_release_lacks_is_refused_and_an_untyped_flag_is_sent_to_extra_flags(
    tmp_path: Path,
) -> None:
    message = _axes_refused(
        tmp_path,
        "  - {key: server.extra_flags.schedule_polcy, values: [lpm, fcfs]}\n"
        "  - {key: server.enable_torch_compile, values: [true, false]}\n",
    )
    assert (
        "axes.0.key server.extra_flags.schedule_polcy: SGLang 0.5.8 has no launch flag 'schedule_polcy'"
        in (message)
    )
    assert "schedule_policy" in message
    assert "axes.1.key server.enable_torch_compile: the server section has no typed field" in message
    assert "is set as server.extra_flags.enable_torch_compile" in message


@pytest.mark.parametrize(
    ("axis", "said"),
    [
        (
            "{key: server.cuda_graf_max_bs, values: [128, 256]}",
            "axes.0.key server.cuda_graf_max_bs: the server section has no key 'cuda_graf_max_bs'; "
            "did you mean server.cuda_graph_max_bs?",
        ),
        (
            '{key: server.cuda_graph_max_bs, values: [128, "lots"]}',
            "axes.0.values[1]: 'lots' is not allowed for server.cuda_graph_max_bs: "
            "Input should be a valid integer",
        ),
        (
            "{key: server.tp_size, values: [16, 32]}",
            "Preflight discards all 2 candidates of campaign typo (tp-exceeds-gpus), so nothing would run.",
        ),
    ],
)
def test_sweep_run_of_a_campaign_that_cannot_run_exits_2_and_creates_nothing(
    tmp_path: Path, axis: str, said: str
) -> None:
    workspace = Workspace.create(tmp_path)
    base = emulator_stack(port=30000, state_dir=tmp_path)
    (workspace.path / "stacks" / "Pulumi.base.yaml").write_text(base)
    (workspace.path / "campaigns").mkdir()
    (workspace.path / "campaigns" / "typo.yaml").write_text(f"base: base\naxes:\n  - {axis}\n" + POOL)

    result = workspace.cli("sweep", "run", "typo")

    assert result.returncode == 2, result.stdout + result.stderr
    assert said in result.stderr.replace("\n", " ")
    assert not (workspace.path / "reports" / "typo").exists()  # no study, no logs
    assert [p.name for p in (workspace.path / "stacks").iterdir()] == ["Pulumi.base.yaml"]
    assert list(workspace.backend.rglob("*.json")) == []  # no trial stack in the backend


def test_every_axis_value_is_checked_as_the_field_it_sets(tmp_path: Path) -> None:
    # It was accepted: the study was made and the rest ran, "lots" becoming silent discards.
    message = _axes_refused(
        tmp_path,
        '  - {key: server.cuda_graph_max_bs, values: [128, "lots", auto, null]}\n'
        "  - {key: server.mem_fraction_static, values: [0.8, 1.5]}\n"
        "  - {key: environment.env.NCCL_ALGO, values: [Ring, [Tree]]}\n"
        "  - name: spec\n"
        "    zip: {server.speculative_num_steps: [1, two], draftModel: [null, {source: nowhere}]}\n",
    )

    assert "The campaign gives 5 value(s) that no stack takes" in message
    assert "axes.0.values[1]: 'lots' is not allowed for server.cuda_graph_max_bs" in message
    assert (
        "axes.1.values[1]: 1.5 is not allowed for server.mem_fraction_static: Input should be less than 1"
        in (message)
    )
    assert "axes.2.values[1]: ['Tree'] is not allowed for environment.env.NCCL_ALGO" in message
    assert "axes.3.zip server.speculative_num_steps[1]: 'two' is not allowed" in message
    assert "axes.3.zip draftModel[1]: {'source': 'nowhere'} is not allowed for draftModel" in message
    assert "'auto'" not in message and "None" not in message  # they leave the key unset
    assert "nothing was created" in message


def test_axis_keys_of_the_stack_sections_and_the_release_flags_are_accepted(tmp_path: Path) -> None:
    plan = _axes_plan(
        tmp_path,
        "  - {key: server.extra_flags.schedule_policy, values: [lpm, fcfs]}\n"
        "  - {key: environment.env.NCCL_ALGO, values: [Ring, auto]}\n"
        "  - {key: environment.emulator.time_scale, values: [0.002]}\n"
        "  - {key: draftModel, values: [null]}\n",
    )

    assert len(plan.kept()) == 4


def test_a_candidate_the_memory_plan_cannot_judge_is_kept_never_discarded(tmp_path: Path) -> None:
    # At 0.5 the Kimi-K2.5 weights leave no KV pool: judged, the candidate is discarded. With the KV
    # pool sized after graph capture (a sizing the model does not follow) the plan cannot judge it,
    # and the campaign keeps it for its own start to decide.
    plan = _axes_plan(
        tmp_path,
        "  - {key: server.mem_fraction_static, values: [0.5]}\n"
        "  - {key: environment.env.SGLANG_ENABLE_POST_CAPTURE_KV_SIZING, values: ['0', '1']}\n",
    )

    by_env = {
        row.candidate.labels["environment.env.SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"]: row for row in plan.rows
    }
    assert by_env["0"].verdict == "discarded" and by_env["0"].reasons[0].startswith("memory-does-not-fit:")
    assert by_env["1"].verdict == "kept" and "memory-unjudged" in by_env["1"].warnings


def test_auto_removes_a_key_and_values_set_nested_keys() -> None:
    base = {"server": {"mem_fraction_static": 0.8, "tp_size": 8}}

    applied = apply(base, {"server.mem_fraction_static": "auto", "environment.env.NCCL_ALGO": "Ring"})

    assert applied == {"server": {"tp_size": 8}, "environment": {"env": {"NCCL_ALGO": "Ring"}}}
    assert base["server"]["mem_fraction_static"] == 0.8


def test_the_shipped_schema_is_the_models() -> None:
    assert json.loads((ROOT / "campaigns" / "schema.json").read_text()) == campaign_json_schema()


def _trial(stack: str, runs: list[float]) -> TrialRecord:
    level = BenchmarkResult.model_validate(
        {
            "concurrency": 1,
            "input_len": 32,
            "output_len": 48,
            "repetitions": len(runs),
            "tok_s_mean": 0.0,
            "tok_s_stdev": 0.0,
            "tok_s_ci95": [0.0, 0.0],
            "tok_s_runs": runs,
            "requests": len(runs),
            "errors": 0,
        }
    )
    return TrialRecord(
        stack=stack,
        labels={"x": stack},
        status="done",
        levels=[level],
        number=0,
        trial_id=0,
        state="COMPLETE",
    )


def test_a_winner_within_noise_of_the_runner_up_is_called_so() -> None:
    ranking = rank(
        ObjectiveSpec(),
        [_trial("a", [89.0, 90.0, 88.0]), _trial("b", [89.5, 88.5, 89.0]), _trial("c", [82.0, 81.5, 82.5])],
    )

    assert [t.stack for t in ranking.trials] == ["a", "b", "c"]
    assert [t.stack for t in ranking.within_noise_of_best()] == ["a", "b"]
    assert "within noise of b" in ranking.verdict()
    assert not ranking.trials[2].within_noise


def test_a_clear_winner_is_called_clear() -> None:
    ranking = rank(ObjectiveSpec(), [_trial("a", [89.0, 90.0, 88.0]), _trial("c", [82.0, 81.5, 82.5])])

    assert "significantly ahead of the runner-up c" in ranking.verdict()


def test_a_tiny_p_value_reads_as_below_a_thousandth() -> None:
    ranking = rank(ObjectiveSpec(), [_trial("a", [89.0, 89.1, 89.0]), _trial("c", [54.0, 54.1, 54.0])])

    assert "(-39.3 %, p<0.001, beyond the 2.8 % margin of launches and hosts): a clear winner" in (
        ranking.verdict()
    )
    assert "p=<" not in ranking.verdict()


def test_a_pool_host_that_does_not_answer_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    # It was charged trial by trial: "failed (host)" for each candidate it was handed.
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    facts = ", ".join(f"{key}: {json.dumps(value)}" for key, value in EMULATOR_HOST_FACTS.items())
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHb3"
    ssh = f"kind: ssh, user: ubuntu, connect_timeout_s: 2, {facts}, host_key: {key}"
    (tmp_path / "Pulumi.base.yaml").write_text(emulator_stack(port=30000, state_dir=tmp_path))
    path = tmp_path / "far.yaml"
    path.write_text(
        "base: base\naxes:\n  - {key: server.cuda_graph_max_bs, values: [128]}\npool:\n"
        "  - {name: here, host: {kind: emulator, state_dir: /tmp/a}, port: 30001}\n"
        f"  - {{name: gone, host: {{address: gpu-a.invalid, {ssh}}}}}\n"
        f"  - {{name: closed, host: {{address: 127.0.0.1, port: {port}, {ssh}}}}}\n"
    )
    plan = make_plan("far", load_campaign(path), tmp_path)

    with pytest.raises(SpecError) as error:
        check_pool_answers(plan)

    message = str(error.value)
    assert message.startswith("2 pool host(s) of campaign far do not answer:")
    assert "pool.1 (gone): gpu-a.invalid:22 does not answer (" in message
    assert f"pool.2 (closed): 127.0.0.1:{port} does not answer (Connection refused)" in message
    assert "Check host.address and host.port" in message and "nothing was created" in message
    assert "pool.0" not in message
