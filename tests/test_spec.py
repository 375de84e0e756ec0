import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sglang_emulator.profile_loading import load_profile
from sglang_stacks.config.sections import HostSpec
from sglang_stacks.config.spec import EMULATOR_HOST_FACTS, StackSpec, load_spec, spec_json_schema
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_stacks.errors import SpecError
from tests._stacks import STACKS_DIR

SECTIONS: dict[str, Any] = {
    "host": {"kind": "emulator"},
    "environment": {"sglang_release": "0.5.8"},
    "model": {"path": "/shared/kimi-k2.5-int4", "weights_per_gpu_gb": 72.33},
    "draftModel": {"source": "host", "path_on_host": "/data/eagle3/4", "weights_gb": 2.4},
    "server": {"tp_size": 8, "cuda_graph_max_bs": 128, "speculative_algorithm": "EAGLE"},
}
SSH_HOST = {
    "kind": "ssh",
    "address": "10.0.0.7",
    "user": "ubuntu",
    "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
    **EMULATOR_HOST_FACTS,
    "gpu_model": "NVIDIA H200",
}


def _with(path: str, value: Any) -> dict[str, Any]:
    """SECTIONS with one dotted key set (value None deletes it)."""
    sections = copy.deepcopy(SECTIONS)
    *parents, last = path.split(".")
    node = sections
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return sections


def _problems(sections: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as error:
        load_spec(sections, "test")
    return str(error.value)


def test_valid_sections_load_with_defaults_from_the_model():
    spec = load_spec(SECTIONS, "test")
    assert spec.host.kind == "emulator"
    assert spec.host.memory_per_gpu_mib == 97887
    assert spec.host.sm_major == 12
    assert not spec.host.needs_ssh_key
    assert spec.benchmark.concurrency == (1,)
    assert spec.benchmark.repetitions == 5
    assert spec.benchmark.ignore_eos is True
    assert spec.gate is None


def test_launch_flags_fill_model_and_draft_paths_from_their_sections():
    flags = load_spec(SECTIONS, "test").launch_flags()
    assert flags.model_path == "/shared/kimi-k2.5-int4"
    assert flags.speculative_draft_model_path == "/data/eagle3/4"


def test_draft_path_is_only_filled_under_speculative_decoding():
    sections = _with("server.speculative_algorithm", None)
    assert load_spec(sections, "test").launch_flags().speculative_draft_model_path is None


def test_namespaced_keys_are_accepted_and_secret_keys_skipped():
    sections = {f"sglang-stacks:{k}": v for k, v in SECTIONS.items()}
    sections["sglang-stacks:sshPrivateKey"] = {"secure": "v1:abc"}
    assert load_spec(sections, "test") == load_spec(SECTIONS, "test")


def test_spec_is_frozen():
    spec = load_spec(SECTIONS, "test")
    with pytest.raises(ValidationError):
        spec.server.tp_size = 4  # type: ignore[misc]


def test_type_error_names_key_path_value_and_expected_type():
    text = _problems(_with("server.cuda_graph_max_bs", "lots"))
    assert "sglang-stacks:server.cuda_graph_max_bs: 'lots' is not allowed; expected integer" in text
    text = _problems(_with("server.mem_fraction_static", "0.85x"))
    assert "sglang-stacks:server.mem_fraction_static: '0.85x' is not allowed; expected number" in text
    # A fraction is no integer: "0.5" for an integer knob is refused, not rounded.
    assert "expected integer" in _problems(_with("server.cuda_graph_max_bs", "0.5"))


def test_numbers_stored_as_text_read_as_the_schemas_type():
    """`pulumi config set --path sglang-stacks:server.mem_fraction_static 0.85` stores "0.85"."""
    sections = _with("server.mem_fraction_static", "0.85")
    sections["server"]["cuda_graph_max_bs"] = " 256 "
    sections["server"]["disable_custom_all_reduce"] = "true"
    sections["benchmark"] = {"concurrency": ["1", 8], "input_len": "512", "requests_per_repetition": "8"}
    spec = load_spec(sections, "test")
    assert spec.server.mem_fraction_static == 0.85
    assert spec.server.cuda_graph_max_bs == 256
    assert spec.server.disable_custom_all_reduce is True
    assert (spec.benchmark.concurrency, spec.benchmark.input_len) == ((1, 8), 512)
    # Text where the schema takes text stays text: a path of digits, a release, a free flag value.
    sections = _with("model.path", "2024")
    sections["server"]["extra_flags"] = {"schedule_policy": "lpm", "max_prefill_tokens": "16384"}
    spec = load_spec(sections, "test")
    assert spec.model.path == "2024"
    assert spec.server.extra_flags == {"schedule_policy": "lpm", "max_prefill_tokens": "16384"}
    # Limits still hold once read: 1.5 is a number, but no fraction.
    assert "mem_fraction_static: 1.5 is not allowed; expected less than 1.0" in _problems(
        _with("server.mem_fraction_static", "1.5")
    )


def test_unknown_key_suggests_the_nearest_name():
    text = _problems(_with("server.cuda_graph_max_bz", 128))
    assert "sglang-stacks:server.cuda_graph_max_bz: unknown key" in text
    assert "did you mean cuda_graph_max_bs?" in text


def test_every_problem_is_listed_at_once():
    sections = _with("server.mem_fraction_static", 1.2)
    sections["server"]["speculative_algorithm"] = "EAGLE4"
    sections["host"]["port"] = 0
    text = _problems(sections)
    assert "has 3 config problem(s)" in text
    assert "sglang-stacks:server.mem_fraction_static: 1.2 is not allowed; expected less than 1.0" in text
    assert "expected one of EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM" in text
    assert "sglang-stacks:host.port: 0 is not allowed; expected at least 1" in text


def test_missing_section_is_named():
    assert "'model' is a required property. Add it." in _problems(_with("model", None))


@pytest.mark.parametrize("host", [None, {}, {"gpu_count": 8}])
def test_a_stack_without_its_hosts_kind_is_refused_with_the_fix(host):
    """No host section (or one that does not say its kind) never means the local emulator."""
    text = _problems(_with("host", host))
    assert "sglang-stacks:host.kind is missing: a stack names the host it runs on" in text
    assert "`sglang-stacks:host: {kind: emulator}`" in text and "`kind: ssh`" in text


def test_unknown_section_is_named_with_the_allowed_ones():
    text = _problems(_with("servers", {}))
    assert "sglang-stacks:servers: unknown key" in text
    assert "did you mean server?" in text


def test_emulator_host_facts_are_fixed():
    text = _problems(_with("host.gpu_count", 4))
    assert "sglang-stacks:host" in text
    assert "gpu_count=4" in text
    assert "declare gpu_count=8" in text


def test_ssh_host_must_declare_its_facts_and_pinned_key():
    text = _problems(_with("host", {"kind": "ssh", "address": "10.0.0.7", "user": "ubuntu"}))
    assert "an ssh host must declare host_key, gpu_model, gpu_count" in text
    assert "ssh-keyscan" in text


def test_ssh_host_with_facts_loads_and_needs_a_key():
    host = load_spec(_with("host", SSH_HOST), "test").host
    assert host.needs_ssh_key
    assert host.gpu_model == "NVIDIA H200"
    assert host.port == 22


def test_ssh_host_key_must_look_like_a_public_key():
    text = _problems(_with("host", {**SSH_HOST, "host_key": "AAAA"}))
    assert "sglang-stacks:host.host_key" in text


def test_unknown_release_names_the_nearest_shipped_ones_and_the_fix():
    text = _problems(_with("environment.sglang_release", "0.5.24"))
    assert "sglang-stacks:environment.sglang_release (value '0.5.24')" in text
    assert "the nearest releases with one are 0.5.23" in text
    assert "python -m sglang_flags.regenerate 0.5.24" in text
    text = _problems(_with("environment.sglang_release", "0.5.8.post9"))
    assert "the nearest releases with one are 0.5.8.post1 and 0.5.9" in text


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"NCCL ALGO": "Tree"}, "are not variable names"),
        ({"NCCL_ALGO": "Tree; reboot"}, "contain shell metacharacters"),
        ({"NCCL_ALGO": "$(id)"}, "contain shell metacharacters"),
    ],
)
def test_environment_variables_are_checked(env, complaint):
    assert complaint in _problems(_with("environment.env", env))


def test_environment_variables_that_are_safe_load():
    env = {
        "NCCL_ALGO": "^Tree",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    assert load_spec(_with("environment.env", env), "test").environment.env == env


def test_extra_pins_must_be_exact():
    assert "exact pins" in _problems(_with("environment.extra_pins", ["flashinfer-python>=0.2"]))
    pins = ("flashinfer-python==0.2.9", "sgl-kernel==0.3.16.post3")
    assert load_spec(_with("environment.extra_pins", list(pins)), "test").environment.extra_pins == pins


def test_model_needs_exactly_one_weight_size():
    both = _with("model.total_weights_gb", 578.6)
    assert "set exactly one of weights_per_gpu_gb and total_weights_gb" in _problems(both)


def test_total_weights_are_divided_by_tensor_parallel_size():
    sections = _with("model", {"path": "/m", "total_weights_gb": 578.64})
    spec = load_spec(sections, "test")
    assert spec.model.weights_gb_per_gpu(spec.tp_size) == pytest.approx(72.33)


def test_local_draft_model_needs_its_folder():
    assert "source: local needs local_path" in _problems(_with("draftModel.source", "local"))


def test_draft_manifest_digests_are_checked():
    text = _problems(_with("draftModel.sha256_manifest", {"model.safetensors": "abc"}))
    assert "model.safetensors need 64 lowercase hex digits" in text


def test_benchmark_needs_enough_requests_for_its_concurrency():
    text = _problems(_with("benchmark", {"concurrency": [1, 64]}))
    assert "set it to at least 64" in text


def test_server_model_path_must_agree_with_the_model_section():
    text = _problems(_with("server.model_path", "/elsewhere"))
    assert "remove server.model_path (it defaults to model.path)" in text


def test_gate_section():
    spec = load_spec(_with("gate", {"baseline_stack": "baseline", "on_regression": "hand_back"}), "test")
    assert spec.gate is not None
    assert spec.gate.tolerance_pct == 5.0
    assert "expected one of fail, hand_back" in _problems(
        _with("gate", {"baseline_stack": "b", "on_regression": "x"})
    )


def test_exported_schema_file_is_current():
    exported = json.loads((Path(STACKS_DIR) / "schema.json").read_text())
    assert exported == spec_json_schema(), (
        "regenerate with: python -m sglang_stacks.cli schema --output stacks/schema.json"
    )


def test_schema_carries_the_field_docstrings():
    server = spec_json_schema()["$defs"]["ServerFlags"]["properties"]
    assert "CUDA graph" in server["cuda_graph_max_bs"]["description"]


@pytest.mark.parametrize("path", sorted(STACKS_DIR.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_every_shipped_stack_loads(path):
    stack = path.name[len("Pulumi.") : -len(".yaml")]
    spec = load_stack_spec(stack, STACKS_DIR)
    assert isinstance(spec, StackSpec)
    hosts: list[HostSpec] = [*spec.fleet.hosts] if spec.fleet else [spec.host]
    # Every shipped stack runs here, no GPU: on the emulator host, or as the emulator's pods on the
    # local cluster (scripts/k8s-up.sh).
    assert all(host.kind in ("emulator", "kubernetes") for host in hosts)
    assert spec.runtime == "emulator"
    # The model its emulator profile plays: the campaign's (72.33 GB per GPU at tp 8, or the whole of
    # it over the two-node demo's 16 GPUs), or the cluster fleet's Llama-3.1-8B on one GPU.
    played = load_profile(spec.environment.emulator.profile).model.weights_gib_total
    per_gpu = round(played / spec.tp_size, 2)
    assert (spec.model.weights_per_gpu_gb, spec.model.total_weights_gb) in ((per_gpu, None), (None, played))


def test_emulator_faults_are_checked_by_the_spec_before_anything_runs() -> None:
    # A wrong fault used to surface only at the server's start, after another stack's server
    # had been stopped for it.
    problems = _problems(_with("environment.emulator", {"faults": {"crash_after_request": 3}}))
    assert "environment.emulator.faults" in problems and "crash_after_request" in problems
    assert "crash_after_requests" in problems
    hang = _problems(_with("environment.emulator", {"faults": {"hang_at_phase": "loading"}}))
    assert "'loading'" in hang and "weights" in hang
    good = load_spec(_with("environment.emulator", {"faults": {"slow_readiness_s": 2}}), "test")
    assert good.environment.emulator.faults == {"slow_readiness_s": 2}


def test_the_ssh_connect_timeout_is_a_host_setting() -> None:
    spec = load_spec({**SECTIONS, "host": {**SSH_HOST, "connect_timeout_s": 45}}, "test")
    assert spec.host.connect_timeout_s == 45
    assert load_spec({**SECTIONS, "host": SSH_HOST}, "test").host.connect_timeout_s == 10
    problems = _problems({**SECTIONS, "host": {**SSH_HOST, "connect_timeout_s": 0}})
    assert "host.connect_timeout_s" in problems


def test_a_valid_config_loads_without_building_the_schema_validator() -> None:
    # Each program run (twice per `pulumi up`) pays for what load_spec imports; the JSON Schema
    # validator is only needed to describe a config with problems.
    code = (
        "import sys, json; from sglang_stacks.config.spec import load_spec; "
        f"load_spec(json.loads({json.dumps(json.dumps(SECTIONS))}), 'test'); "
        "print('jsonschema' in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"
