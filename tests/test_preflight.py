import copy
from typing import Any

import pytest

from sglang_stacks.config.preflight import Finding, raise_on_errors, run_preflight
from sglang_stacks.config.spec import EMULATOR_HOST_FACTS, StackSpec, load_spec
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_stacks.errors import PreflightError
from tests._stacks import STACKS_DIR

# baseline-bs128 of the campaign: clean on both releases apart from the unknown auto fraction.
BASE: dict[str, Any] = {
    "host": {"kind": "emulator"},
    "environment": {"sglang_release": "0.5.8"},
    "model": {"path": "/shared/kimi-k2.5-int4", "weights_per_gpu_gb": 72.33},
    "server": {
        "tp_size": 8,
        "cuda_graph_max_bs": 128,
        "disable_custom_all_reduce": True,
        "mem_fraction_static": 0.85,
    },
}
DRAFT = {"source": "host", "path_on_host": "/data/eagle3/4", "weights_gb": 2.4}
EAGLE = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 2,
    "speculative_eagle_topk": 4,
    "speculative_num_draft_tokens": 4,
    "mem_fraction_static": 0.88,
    "max_running_requests": 48,
}
H100_HOST = {
    "kind": "ssh",
    "address": "10.0.0.7",
    "user": "ubuntu",
    "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
    **EMULATOR_HOST_FACTS,
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "memory_per_gpu_mib": 81559,
    "compute_capability": "9.0",
    "interconnect": "nvlink",
}


def _spec(server: dict[str, Any] | None = None, **sections: Any) -> StackSpec:
    raw = copy.deepcopy(BASE)
    raw["server"].update(server or {})
    raw.update(sections)
    return load_spec(raw, "test")


def _codes(findings: list[Finding], severity: str | None = None) -> list[str]:
    return [f.code for f in findings if severity is None or f.severity == severity]


def _one(findings: list[Finding], code: str) -> Finding:
    matches = [f for f in findings if f.code == code]
    assert len(matches) == 1, _codes(findings)
    return matches[0]


@pytest.mark.parametrize(
    ("release", "warnings"),
    # 0.5.23 sizes its KV pool with code the plan does not run: its token count is approximated.
    [("0.5.8", []), ("0.5.23", ["kv-pool-approximated"])],
)
def test_clean_configuration_has_no_errors_or_warnings(release, warnings):
    findings = run_preflight(_spec(environment={"sglang_release": release}), release)
    assert _codes(findings, "error") == []
    assert _codes(findings, "warning") == warnings
    assert _one(findings, "memory-plan").severity == "info"


def test_eagle3_oom_at_the_automatic_fraction_is_an_error_with_the_fraction_that_fits():
    raw = copy.deepcopy(BASE)
    raw["server"].update(EAGLE)
    del raw["server"]["mem_fraction_static"]
    raw["model"].update(vision_num_layers=27, vision_hidden_size=1152)
    raw["draftModel"] = DRAFT
    findings = run_preflight(load_spec(raw, "test"), "0.5.8")
    finding = _one(findings, "memory-does-not-fit")
    assert finding.severity == "error"
    # SGLang's own message where it stops, and the fraction the plan says fits.
    assert "KV cache" in finding.message and "Not enough memory" in finding.message
    assert finding.fix.startswith("Set mem_fraction_static to 0.77 or more")
    assert "does not fit at mem_fraction_static 0.76 (chosen by SGLang 0.5.8 itself)" in finding.message


def test_eagle3_at_0_88_passes_the_memory_check():
    findings = run_preflight(_spec(EAGLE, draftModel=DRAFT), "0.5.8")
    assert _codes(findings, "error") == []
    assert "Verdict: fits" in _one(findings, "memory-plan").message


@pytest.mark.parametrize("release", ["0.5.1", "0.5.14", "0.5.23"])
def test_every_release_judges_its_own_automatic_fraction(release):
    raw = copy.deepcopy(BASE)
    del raw["server"]["mem_fraction_static"]
    raw["environment"]["sglang_release"] = release
    if release == "0.5.23":
        raw["server"]["cuda_graph_max_bs"] = 128  # rendered as 0.5.23's --cuda-graph-max-bs-decode
    findings = run_preflight(load_spec(raw, "test"), release)
    memory = [f for f in findings if f.code.startswith("memory-")]
    assert [f.code for f in memory] in (["memory-plan"], ["memory-does-not-fit"])
    assert f"chosen by SGLang {release} itself" in memory[0].message


def test_a_launch_the_plan_cannot_judge_is_kept_with_a_warning():
    # SGLANG_ENABLE_POST_CAPTURE_KV_SIZING makes SGLang size its KV pool after graph capture,
    # which the model does not follow: the plan says so and preflight stops nothing.
    findings = run_preflight(
        _spec(environment={"env": {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1"}}), "0.5.23"
    )
    finding = _one(findings, "memory-unjudged")
    assert finding.severity == "warning" and "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING" in finding.message
    assert _codes(findings, "error") == []


@pytest.mark.parametrize(
    ("flag", "code"),
    [
        ("enable_flashinfer_allreduce_fusion", "sm120-flashinfer-allreduce-fusion"),
        ("enable_torch_symm_mem", "sm120-torch-symm-mem"),
    ],
)
@pytest.mark.parametrize("release", ["0.5.8", "0.5.23"])
def test_sm120_rejects_flashinfer_fusion_and_torch_symmetric_memory(flag, code, release):
    finding = _one(run_preflight(_spec({flag: True}), release), code)
    assert finding.severity == "error"
    assert "SM120" in finding.message
    assert finding.key == f"server.{flag}"


@pytest.mark.parametrize("flag", ["enable_flashinfer_allreduce_fusion", "enable_torch_symm_mem"])
def test_the_same_flags_pass_on_sm90(flag):
    spec = _spec(
        {flag: True, "mem_fraction_static": 0.95},
        host=H100_HOST,
        model={"path": "/m", "total_weights_gb": 300},
    )
    assert not any(c.startswith("sm120") for c in _codes(run_preflight(spec, "0.5.8")))


def test_nccl_tree_with_cuda_graphs_is_an_error():
    finding = _one(
        run_preflight(_spec(environment={"env": {"NCCL_ALGO": "Tree"}}), "0.5.8"), "nccl-tree-cuda-graphs"
    )
    assert finding.severity == "error"
    assert finding.key == "environment.env.NCCL_ALGO"


@pytest.mark.parametrize(
    ("algo", "server", "expected"),
    [
        ("tree", {}, "error"),
        ("Tree,Ring", {}, "warning"),
        ("^Tree", {}, None),
        ("Ring", {}, None),
        ("Tree", {"disable_cuda_graph": True}, None),
    ],
)
def test_nccl_tree_rule_variants(algo, server, expected):
    findings = run_preflight(_spec(server, environment={"env": {"NCCL_ALGO": algo}}), "0.5.8")
    severities = [f.severity for f in findings if f.code == "nccl-tree-cuda-graphs"]
    assert severities == ([expected] if expected else [])


def test_custom_all_reduce_over_pcie_is_a_warning_citing_the_slowdown():
    findings = run_preflight(_spec({"disable_custom_all_reduce": False}), "0.5.8")
    finding = _one(findings, "pcie-custom-all-reduce")
    assert finding.severity == "warning"
    assert "38 tok/s" in finding.message and "82 tok/s" in finding.message
    assert _codes(findings, "error") == []
    raise_on_errors(findings)  # allowed: warnings do not stop the launch


def test_custom_all_reduce_is_fine_over_nvlink_and_on_one_gpu():
    nvlink = _spec(
        {"disable_custom_all_reduce": False}, host=H100_HOST, model={"path": "/m", "total_weights_gb": 300}
    )
    single = _spec(
        {"disable_custom_all_reduce": False, "tp_size": 1}, model={"path": "/m", "weights_per_gpu_gb": 20}
    )
    for spec in (nvlink, single):
        assert "pcie-custom-all-reduce" not in _codes(run_preflight(spec, "0.5.8"))


def test_expert_parallel_with_flashinfer_all_to_all_is_an_error_with_its_memory_cost():
    findings = run_preflight(_spec({"ep_size": 8, "moe_a2a_backend": "flashinfer"}), "0.5.23")
    finding = _one(findings, "ep-flashinfer-a2a")
    assert finding.severity == "error"
    assert "expert_location_metadata is None" in finding.message
    assert "21.7 GB to 16.3 GB" in finding.message


def test_flashinfer_all_to_all_on_0_5_8_is_also_unknown_to_its_flag_table():
    findings = run_preflight(_spec({"ep_size": 8, "moe_a2a_backend": "flashinfer"}), "0.5.8")
    assert {"ep-flashinfer-a2a", "flag-unrenderable"} <= set(_codes(findings, "error"))
    assert "ascend_fuseep" in _one(findings, "flag-unrenderable").message


def test_speculative_settings_must_come_all_three_or_none():
    server = {**EAGLE}
    del server["speculative_eagle_topk"]
    finding = _one(run_preflight(_spec(server, draftModel=DRAFT), "0.5.8"), "speculative-partial")
    assert finding.key == "server.speculative_eagle_topk"
    assert "all three or none" in finding.message


def test_topk_one_needs_steps_plus_one_draft_tokens():
    server = {**EAGLE, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    finding = _one(run_preflight(_spec(server, draftModel=DRAFT), "0.5.8"), "speculative-topk1-tokens")
    assert finding.fix == "Set speculative_num_draft_tokens to 3."
    ok = {**server, "speculative_num_draft_tokens": 3}
    assert _codes(run_preflight(_spec(ok, draftModel=DRAFT), "0.5.8"), "error") == []


def test_draft_tokens_are_bounded_by_steps_times_topk_plus_one():
    server = {**EAGLE, "speculative_num_draft_tokens": 10}
    finding = _one(run_preflight(_spec(server, draftModel=DRAFT), "0.5.8"), "speculative-too-many-tokens")
    assert "at most 9" in finding.fix
    at_bound = {**server, "speculative_num_draft_tokens": 9}
    assert _codes(run_preflight(_spec(at_bound, draftModel=DRAFT), "0.5.8"), "error") == []


@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3", "STANDALONE"])
def test_algorithms_with_a_draft_model_need_its_path(algorithm):
    finding = _one(
        run_preflight(_spec({**EAGLE, "speculative_algorithm": algorithm}), "0.5.8"),
        "speculative-draft-missing",
    )
    assert "Add a draftModel section" in finding.fix


def test_nextn_uses_the_models_own_layers_and_needs_no_draft():
    findings = run_preflight(_spec({**EAGLE, "speculative_algorithm": "NEXTN"}), "0.5.8")
    assert "speculative-draft-missing" not in _codes(findings)


def test_speculative_settings_without_an_algorithm_are_an_error():
    server = {k: v for k, v in EAGLE.items() if k != "speculative_algorithm"}
    findings = run_preflight(_spec(server, draftModel=DRAFT), "0.5.8")
    assert _one(findings, "speculative-without-algorithm").severity == "error"
    assert _one(findings, "draft-unused").severity == "warning"


def test_unset_max_running_requests_with_speculation_is_explained():
    server = {k: v for k, v in EAGLE.items() if k != "max_running_requests"}
    finding = _one(
        run_preflight(_spec(server, draftModel=DRAFT), "0.5.8"), "speculative-max-running-requests"
    )
    assert "48" in finding.message


def test_tensor_parallel_size_beyond_the_gpu_count_is_an_error():
    finding = _one(run_preflight(_spec({"tp_size": 16}), "0.5.8"), "tp-exceeds-gpus")
    assert "declares 8" in finding.message
    assert _one(run_preflight(_spec({"tp_size": 4}), "0.5.8"), "gpus-idle").severity == "info"


def test_expert_parallel_size_must_divide_tensor_parallel_size():
    assert _one(run_preflight(_spec({"ep_size": 3}), "0.5.8"), "ep-size").severity == "error"
    assert "ep-size" not in _codes(run_preflight(_spec({"ep_size": 4}), "0.5.8"))


def test_flags_unknown_to_the_release_are_errors_naming_the_nearest():
    findings = run_preflight(_spec({"extra_flags": {"enable_piecewise_cuda_graph": True}}), "0.5.23")
    finding = _one(findings, "flag-unrenderable")
    assert finding.key == "server.enable_piecewise_cuda_graph"
    assert "nearest names" in finding.message


def test_deprecated_flag_is_a_warning():
    finding = _one(run_preflight(_spec({"disable_cuda_graph": True}), "0.5.23"), "flag-deprecated")
    assert finding.severity == "warning"
    assert "flag-deprecated" not in _codes(run_preflight(_spec({"disable_cuda_graph": True}), "0.5.8"))


def test_checking_for_another_release_than_the_pinned_one_warns():
    finding = _one(run_preflight(_spec(), "0.5.23"), "release-mismatch")
    assert finding.severity == "warning"


def test_a_release_without_a_table_is_one_error():
    findings = run_preflight(_spec(), "0.6.0")
    assert _codes(findings) == ["release-unknown"]


def test_benchmark_beyond_the_limits_warns():
    spec = _spec(
        {"max_running_requests": 16}, benchmark={"concurrency": [1, 256], "requests_per_repetition": 256}
    )
    codes = _codes(run_preflight(spec, "0.5.8"), "warning")
    assert "benchmark-over-running-limit" in codes
    assert "benchmark-over-graph-bs" in codes


def test_findings_come_errors_first():
    findings = run_preflight(_spec({"tp_size": 16, "disable_custom_all_reduce": False}), "0.5.8")
    order = [f.severity for f in findings]
    assert order == sorted(order, key=["error", "warning", "info"].index)


def test_raise_on_errors_lists_every_error():
    findings = run_preflight(_spec({"tp_size": 16, "enable_torch_symm_mem": True}), "0.5.8")
    with pytest.raises(PreflightError) as error:
        raise_on_errors(findings)
    text = str(error.value)
    assert "nothing was launched" in text
    assert "server.tp_size" in text and "server.enable_torch_symm_mem" in text


# What preflight says about each campaign stack, on the release it pins (docs/preflight.md). The
# stacks pinned to 0.5.8 serve Kimi-K2.5, whose model class 0.5.8 does not have (release-lacks-model);
# ep-a2a (0.5.23) is refused by 0.5.23's own argument resolution (release-refuses).
LACKS = "release-lacks-model"
CAMPAIGN = {
    "baseline": ([], [LACKS]),
    "baseline-bs128": ([], [LACKS]),
    "eagle3-bs512": ([], [LACKS]),
    "eagle3-bs128": ([], [LACKS]),
    "eagle3-auto-mem": (["memory-does-not-fit"], [LACKS]),
    "custom-allreduce": ([], [LACKS, "pcie-custom-all-reduce"]),
    "flashinfer-fusion": (["sm120-flashinfer-allreduce-fusion"], [LACKS]),
    "symm-mem": (["sm120-torch-symm-mem"], [LACKS]),
    "nccl-tree": (["nccl-tree-cuda-graphs"], [LACKS]),
    "ep-a2a": (["release-refuses", "ep-flashinfer-a2a"], []),
}


@pytest.mark.parametrize("stack", sorted(CAMPAIGN))
def test_campaign_stacks_get_exactly_the_findings_the_campaign_explains(stack):
    spec = load_stack_spec(stack, STACKS_DIR)
    findings = run_preflight(spec, spec.environment.sglang_release)
    errors, warnings = CAMPAIGN[stack]
    assert _codes(findings, "error") == errors
    assert _codes(findings, "warning") == warnings


def test_deprecated_extra_flag_is_a_warning_too():
    findings = run_preflight(_spec({"extra_flags": {"enable_dp_attention": True}}), "0.5.23")
    assert _one(findings, "flag-deprecated").key == "server.enable_dp_attention"
