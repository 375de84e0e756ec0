"""A disaggregated fleet in the stack spec (``fleet.disaggregation``, each host's ``role``): the flags
each role launches with, accepted by the real parsers of 0.5.8 and 0.5.23; ``render --role``; the
errors that name the key and the fix; and each role's memory plan where the release's own code is
followed (read from its wheel), said unjudged where it is not."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from sglang_flags import parser
from sglang_stacks import cli
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.spec import load_spec
from sglang_stacks.config.stackfile import load_stack_spec, read_stack_file
from sglang_stacks.errors import SpecError
from sglang_stacks.exits import ExitCode
from sglang_world import pool_code
from tests._pulumi import Workspace, shipped_stack_config
from tests._stacks import STACKS_DIR

DEMO = read_stack_file("demo-pd", STACKS_DIR).sections


def demo(**fleet: Any) -> dict[str, Any]:
    """The shipped demo's sections, its fleet section updated with ``fleet``."""
    sections = copy.deepcopy(dict(DEMO))
    sections["fleet"] = {**sections["fleet"], **fleet}
    return sections


def untagged(bootstrap_ports: bool = False) -> list[dict[str, Any]]:
    """The demo's hosts without their roles (and bootstrap ports), each with its own bootstrap port
    when ``bootstrap_ports``."""
    hosts = [
        {k: v for k, v in h.items() if k not in ("role", "bootstrap_port")} for h in DEMO["fleet"]["hosts"]
    ]
    return [{**h, "bootstrap_port": 9200 + i} for i, h in enumerate(hosts)] if bootstrap_ports else hosts


@pytest.mark.parametrize(("prefill", "decode", "roles"), [(1, None, "PDD"), (None, 1, "PPD"), (2, 1, "PPD")])
def test_worker_counts_give_untagged_hosts_their_roles_in_order(
    prefill: int | None, decode: int | None, roles: str
) -> None:
    counts = {"prefill": {"workers": prefill}, "decode": {"workers": decode}}
    spec = load_spec(demo(disaggregation=counts, hosts=untagged(bootstrap_ports=True)), "demo-pd")
    modes = [spec.for_host(i).launch_flags().disaggregation_mode for i in range(3)]
    assert "".join(mode[0].upper() for mode in modes if mode) == roles
    # A prefill host serves KV on its own bootstrap port; a decode host's port is unused.
    ports = [spec.for_host(i).launch_flags().disaggregation_bootstrap_port for i in range(3)]
    assert ports == [9200 + i if role == "P" else None for i, role in enumerate(roles)]


def test_each_role_launches_with_its_own_flags_and_the_role_flags() -> None:
    spec = load_stack_spec("demo-pd", STACKS_DIR)
    prefill, decode = spec.for_host(0).launch_flags(), spec.for_host(1).launch_flags()

    assert (prefill.disaggregation_mode, prefill.disaggregation_bootstrap_port) == ("prefill", 8998)
    assert (prefill.chunked_prefill_size, prefill.mem_fraction_static) == (16384, 0.85)
    assert prefill.max_running_requests is None
    assert (decode.disaggregation_mode, decode.disaggregation_bootstrap_port) == ("decode", None)
    assert (decode.max_running_requests, decode.chunked_prefill_size, decode.mem_fraction_static) == (
        256,
        None,
        0.9,
    )
    assert {f.disaggregation_transfer_backend for f in (prefill, decode)} == {"mooncake"}
    # What both roles share comes from the stack's server section.
    assert (prefill.tp_size, decode.tp_size, decode.cuda_graph_max_bs) == (8, 8, 128)


@pytest.mark.parametrize("release", ["0.5.8", "0.5.23"])
def test_every_roles_argv_is_accepted_by_the_releases_own_parser(release: str) -> None:
    spec = load_stack_spec("demo-pd", STACKS_DIR)
    for host in range(3):
        argv = render_argv(spec.for_host(host).launch_flags(), release)
        parsed = parser(release).parse_args(argv)
        assert parsed.disaggregation_mode == ("prefill" if host == 0 else "decode")
        assert parsed.disaggregation_transfer_backend == "mooncake"


def test_render_shows_the_role_it_renders(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", "demo-pd", "--role", "decode"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("Stack demo-pd, SGLang 0.5.8 (host 1, a decode worker)")
    assert "--disaggregation-mode decode" in said and "--max-running-requests 256" in said

    assert cli.main(["render", "demo-fleet", "--role", "prefill"]) == ExitCode.CONFIG_ERRORS
    assert "the stack has no fleet host with role: prefill" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("sections", "says"),
    [
        (demo(disaggregation=None), "fleet.hosts[0].role is set but the fleet has no fleet.disaggregation"),
        (
            demo(hosts=[{**h, "role": None} if i == 2 else h for i, h in enumerate(DEMO["fleet"]["hosts"])]),
            "fleet.hosts[2] has no role",
        ),
        (
            demo(hosts=[{**h, "role": "decode"} for h in DEMO["fleet"]["hosts"]]),
            "no host of fleet.hosts has role: prefill",
        ),
        (
            demo(disaggregation={"decode": {"server": {"port": 31000}}}),
            "fleet.disaggregation.decode.server.port is the fleet's to set, not a role's",
        ),
        (
            demo(rollout={"canary": True}),
            "judges the prefill workers' first worker in a pair beside their second, both out of the router "
            "while a third serves, but the fleet has 1 prefill worker(s); give each role 3 hosts or more, or "
            "set rollout.canary: false",
        ),
        (
            demo(
                hosts=[{**h, "role": "prefill", "bootstrap_port": 9100} for h in DEMO["fleet"]["hosts"][:2]]
                + [DEMO["fleet"]["hosts"][2]]
            ),
            "hosts[0] and hosts[1] are prefill workers on 127.0.0.1 with the same bootstrap port 9100",
        ),
        (
            demo(disaggregation={"decode": {"server": {"extra_flags": {"page_size": 64}}}}),
            "different page_size (prefill None, decode 64): SGLang's decode worker refuses the prefill "
            'worker\'s KV ("Both servers must use the same --page-size value")',
        ),
        (
            demo(disaggregation={"prefill": {"workers": 3}}, hosts=untagged()),
            "counts 3 prefill and 0 decode worker(s) for 3 host(s) in fleet.hosts",
        ),
        (
            demo(
                disaggregation={"prefill": {"workers": 2}},
                hosts=[
                    {**h, "role": r}
                    for h, r in zip(untagged(True), ["prefill", "decode", "decode"], strict=True)
                ],
            ),
            "fleet.hosts name their roles and fleet.disaggregation's workers counts give them others",
        ),
        (
            demo(disaggregation={"prefill": {"workers": 2}}, hosts=untagged()),
            "hosts[0] and hosts[1] are prefill workers on 127.0.0.1 with the same bootstrap port 8998",
        ),
        (
            demo(disaggregation={"prefill": {"server": {"tp_size": 3}}}),
            'roles run tp_size 3 (prefill) and 8 (decode): SGLang supports "different tp size ... only '
            'when one tp is multiple of the other"',
        ),
    ],
)
def test_a_bad_disaggregated_fleet_names_the_key_and_the_fix(sections: dict[str, Any], says: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(sections, "demo-pd")
    assert says in str(caught.value)


def test_roles_with_tp_sizes_that_divide_each_other_are_accepted() -> None:
    spec = load_spec(demo(disaggregation={"prefill": {"server": {"tp_size": 4}}}), "demo-pd")
    assert (spec.for_host(0).launch_flags().tp_size, spec.for_host(1).launch_flags().tp_size) == (4, 8)


def test_a_role_flag_in_the_server_section_is_refused() -> None:
    sections = demo()
    sections["server"] = {**sections["server"], "disaggregation_mode": "decode"}
    with pytest.raises(SpecError) as caught:
        load_spec(sections, "demo-pd")
    assert "server.disaggregation_mode is set in the stack file" in str(caught.value)
    assert "declare fleet.disaggregation with a role on each host" in str(caught.value)


def test_a_prefill_workers_plan_has_no_cuda_graphs_where_its_release_turns_them_off() -> None:
    spec = load_stack_spec("demo-pd", STACKS_DIR)
    prefill = plan_memory(spec.for_host(0), "0.5.8")
    decode = plan_memory(spec.for_host(1), "0.5.8")
    aggregated = plan_memory(spec.for_host(1).model_copy(update={"server": spec.server}), "0.5.8")

    assert prefill.fits and decode.fits
    assert prefill.captured_batch_sizes in (None, []) and not prefill.cuda_graphs_gb
    assert decode.captured_batch_sizes and decode.captured_batch_sizes == aggregated.captured_batch_sizes
    assert decode.cuda_graphs_gb and decode.cuda_graphs_gb > 0


def test_a_release_whose_role_code_is_not_followed_says_so_instead_of_fits() -> None:
    """Without the model's config.json the project's rules cannot follow 0.5.23's role code and say
    so; with it, the release's own code resolves the decode worker and the plan judges it."""
    decode = load_stack_spec("demo-pd", STACKS_DIR).for_host(1)
    unnamed = decode.model_copy(update={"model": decode.model.model_copy(update={"config": None})})
    plan = plan_memory(unnamed, "0.5.23")
    assert plan.verdict == "unknown"
    assert plan.unknown_reason is not None
    assert "SGLang 0.5.23 sizes a decode worker in code the project's model does not follow" in (
        plan.unknown_reason
    )
    executed = plan_memory(decode, "0.5.23")
    assert executed.settings_from == "SGLang 0.5.23's own code" and executed.verdict == "fits"


def test_whether_a_release_resolves_memory_before_the_role_is_read_from_its_server_args(
    tmp_path: Path,
) -> None:
    def tree(name: str, body: str) -> Path:
        folder = tmp_path / name / "sglang" / "srt"
        folder.mkdir(parents=True)
        (folder / "server_args.py").write_text(body)
        return tmp_path / name

    memory_first = (
        "        self._handle_gpu_memory_settings(gpu_mem)\n        self._handle_pd_disaggregation()\n"
        "            logger.warning('Cuda graph is disabled for prefill server when piecewise cuda graph')\n"
    )
    role_first = (
        "        self._handle_pd_disaggregation()\n        self._handle_gpu_memory_settings(gpu_mem)\n"
        "            logger.warning('Cuda graph is disabled for prefill server when piecewise cuda graph')\n"
    )
    assert pool_code.pd_after_memory_in(tree("a", memory_first))
    assert not pool_code.pd_after_memory_in(tree("b", role_first))
    assert not pool_code.pd_after_memory_in(tree("c", memory_first.splitlines()[0]))
    # As recorded from the wheels: 0.5.8 is followed, 0.5.23 is not.
    assert pool_code.pd_planned("0.5.8") and not pool_code.pd_planned("0.5.23")


@pytest.mark.integration
def test_a_fleets_preview_names_each_roles_findings_once(workspace: Workspace, tmp_path: Path) -> None:
    """Preflight of a fleet judges each server with its role's flags: a warning is shown once per
    role, not once per host or not at all, and an error names the role it is about."""
    config = (
        shipped_stack_config("demo-pd", tmp_path)
        .replace("sglang_release: 0.5.8", "sglang_release: 0.5.15")
        .replace("disable_custom_all_reduce: true", "disable_custom_all_reduce: false")
    )
    workspace.init_stack("pd", config)

    previewed = workspace.run("preview", "-s", "pd")

    said = (previewed.stdout + previewed.stderr).split("Diagnostics:")[1]  # each said once there
    for role in ("prefill", "decode"):
        # Custom all-reduce left on over the hosts' PCIe: pcie-custom-all-reduce, once per role.
        assert said.count(f"{role} workers: SGLang's custom all-reduce kernel runs over PCIe") == 1, said
        assert f"{role} workers: Verdict: the plan cannot be judged" not in said, said
    workspace.run(
        "config",
        "set",
        "--path",
        "sglang-stacks:fleet.disaggregation.decode.server.tp_size",
        "16",
        "-s",
        "pd",
    )

    refused = workspace.run("preview", "-s", "pd", check=False)

    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "nothing was launched" in said, said
    assert "decode workers: " in said and "prefill workers: " not in said.split("Preflight found")[1], said
