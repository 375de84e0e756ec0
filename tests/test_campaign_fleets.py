"""Campaigns over fleets, without any host: a pool entry that is a fleet (its hosts and router), the
trial stacks it makes for aggregated and disaggregated candidates on the same GPUs, each role judged
by preflight, and the errors that name the key and the fix. The shipped PD campaigns run in
test_pd_campaign."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_stacks.campaign.axes import apply, bind_host
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.plan import make_plan, plan_campaign
from sglang_stacks.config.spec import load_spec
from sglang_stacks.errors import SpecError
from tests._stacks import STACKS_DIR

ROOT = Path(__file__).resolve().parent.parent
PD_LONG = ROOT / "campaigns" / "pd-long.yaml"

FLEET_POOL = """
pool:
  - name: trio
    fleet:
      hosts:
        - {kind: emulator, server_port: 30201, bootstrap_port: 8901, state_dir: /tmp/trio/h0}
        - {kind: emulator, server_port: 30202, bootstrap_port: 8902, state_dir: /tmp/trio/h1}
        - {kind: emulator, server_port: 30203, bootstrap_port: 8903, state_dir: /tmp/trio/h2}
      router: {port: 30200, metrics_port: 29200, state_dir: /tmp/trio/router}
"""

PD_AXIS = """
axes:
  - name: serving
    labels: [aggregated, 1P-2D]
    zip:
      fleet.disaggregation: [~, {transfer_backend: mooncake, decode: {server: {mem_fraction_static: DECODE}}}]
      fleet.disaggregation.prefill.workers: [~, 1]
"""


def campaign(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pd.yaml"
    path.write_text(text)
    return path


def test_the_shipped_pd_campaign_makes_each_layout_a_fleet_on_the_pools_24_gpus() -> None:
    plan = plan_campaign(PD_LONG, STACKS_DIR)
    pool = plan.campaign.pool[0]
    assert pool.fleet is not None

    specs = {
        row.candidate.labels["serving"]: load_spec(bind_host(row.candidate.sections, pool), row.stack)
        for row in plan.rows
    }

    assert [row.verdict for row in plan.rows] == ["kept"] * 3
    roles = {label: spec.fleet.roles() for label, spec in specs.items() if spec.fleet is not None}
    assert roles == {
        "aggregated": [None, None, None],
        "1P-2D": ["prefill", "decode", "decode"],
        "2P-1D": ["prefill", "prefill", "decode"],
    }
    for label, spec in specs.items():
        assert spec.fleet is not None
        # Every candidate serves on the pool's hosts and router, on all 24 of their GPUs.
        assert [h.server_port for h in spec.fleet.hosts] == [h.server_port for h in pool.fleet.hosts]
        assert spec.fleet.router.port == pool.fleet.router.port
        assert spec.serving_gpus == pool.gpu_count == 24, label
        # A trial's fleet starts at once and is measured through its router only.
        assert not spec.fleet.rollout.canary and not spec.fleet.benchmark_replicas
        assert spec.fleet.batches() == [[0, 1, 2]]
    # A prefill worker serves KV on its pool host's own bootstrap port.
    two_prefill = specs["2P-1D"]
    ports = [two_prefill.for_host(i).launch_flags().disaggregation_bootstrap_port for i in range(3)]
    assert ports == [h.bootstrap_port for h in pool.fleet.hosts[:2]] + [None]


def test_a_role_that_does_not_fit_is_discarded_naming_the_role(tmp_path: Path) -> None:
    text = "base: demo-fleet\n" + PD_AXIS.replace("DECODE", "0.5") + FLEET_POOL
    plan = make_plan("pd", load_campaign(campaign(tmp_path, text)), STACKS_DIR)

    aggregated, split = plan.rows
    assert aggregated.verdict == "kept"
    assert split.verdict == "discarded"
    assert split.reasons[0].startswith("memory-does-not-fit: decode workers: ")
    assert not any("prefill workers" in reason for reason in split.reasons)


def test_a_roles_own_flag_is_an_axis_of_the_disaggregated_candidates_only(tmp_path: Path) -> None:
    text = (
        "base: demo-fleet\n"
        + PD_AXIS.replace("DECODE", "0.9")
        + "  - {key: fleet.disaggregation.decode.server.max_running_requests, values: [128, 256]}\n"
        + FLEET_POOL
    )
    plan = make_plan("pd", load_campaign(campaign(tmp_path, text)), STACKS_DIR)

    # Aggregated serving has no decode role: its two points make one candidate.
    labels = [tuple(row.candidate.labels.values()) for row in plan.rows]
    assert labels == [("aggregated", "128"), ("1P-2D", "128"), ("1P-2D", "256")]
    split = [row.spec for row in plan.rows[1:]]
    assert [s.for_host(1).launch_flags().max_running_requests for s in split if s] == [128, 256]
    assert all(row.verdict == "kept" for row in plan.rows)


def test_unsetting_a_section_leaves_out_the_keys_under_it() -> None:
    base: dict[str, object] = {"fleet": {"hosts": []}}

    applied = apply(base, {"fleet.disaggregation": None, "fleet.disaggregation.prefill.workers": 1})

    assert applied == {"fleet": {"hosts": []}}


@pytest.mark.parametrize(
    ("base", "pool", "says"),
    [
        (
            "demo-fleet",
            "\npool:\n  - {name: a, host: {kind: emulator, state_dir: /tmp/a}, port: 30001}\n",
            "The base stack demo-fleet is a fleet, but pool.0 is one host",
        ),
        ("baseline", FLEET_POOL, "pool.0 is a fleet, but the base stack baseline has no fleet section"),
    ],
)
def test_a_pool_that_is_not_what_the_base_stack_runs_on_is_refused(
    tmp_path: Path, base: str, pool: str, says: str
) -> None:
    text = f"base: {base}\naxes:\n  - {{key: server.cuda_graph_max_bs, values: [128]}}\n" + pool

    with pytest.raises(SpecError, match=says):
        make_plan("pd", load_campaign(campaign(tmp_path, text)), STACKS_DIR)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            ("state_dir: /tmp/trio/h0}", "state_dir: /tmp/trio/h0, role: prefill}"),
            "fleet.hosts\\[0\\].role is set",
        ),
        (
            ("pool:\n", "pool:\n  - {name: a, host: {kind: emulator, state_dir: /tmp/a}, port: 30001}\n"),
            "the pool mixes hosts and fleets",
        ),
        (("port: 30200", "port: 29200"), "a router port repeats in the pool"),
        (
            ("    fleet:\n", "    host: {kind: emulator}\n    fleet:\n"),
            "a pool entry has either host .* or fleet",
        ),
    ],
)
def test_a_bad_pool_fleet_names_the_key_and_the_fix(
    tmp_path: Path, change: tuple[str, str], says: str
) -> None:
    text = "base: demo-fleet\n" + PD_AXIS.replace("DECODE", "0.9") + FLEET_POOL.replace(*change)

    with pytest.raises(SpecError, match=says):
        load_campaign(campaign(tmp_path, text))
