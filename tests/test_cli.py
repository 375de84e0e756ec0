import json
import os
import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sglang_flags import known_releases, release_key
from sglang_stacks.cli import COMMANDS, main
from sglang_stacks.results import history
from sglang_stacks.results.stats import BenchmarkResult, Percentiles
from sglang_world.grid import GRID, GridPoint
from sglang_world.pool_code import PLANNED_WITH, pool_code
from sglang_world.recorded_store import recorded_releases, recorded_rows
from tests._stacks import STACKS_DIR

REPO = Path(__file__).resolve().parent.parent

STACK = """\
config:
  sglang-stacks:host:
    kind: emulator
  sglang-stacks:model:
    path: /models/m
    weights_per_gpu_gb: 20
  sglang-stacks:server:
    tp_size: 2
    disable_custom_all_reduce: true
    mem_fraction_static: 0.8
  sglang-stacks:sshPrivateKey:
    secure: v1:c2VjcmV0LWtleS1jaXBoZXJ0ZXh0
  command:someProviderSetting: ignored
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, in its own process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "sglang_stacks.cli", *args], capture_output=True, text=True, cwd=REPO, env=env
    )


def _result(tok_s: float, accept: float | None = None) -> BenchmarkResult:
    return BenchmarkResult(
        concurrency=1,
        input_len=128,
        output_len=256,
        repetitions=5,
        tok_s_mean=tok_s,
        tok_s_stdev=0.4,
        tok_s_ci95=(tok_s - 0.5, tok_s + 0.5),
        tok_s_runs=(tok_s,) * 5,
        ttft_ms=Percentiles(p50=42.0, p90=45.0, p99=47.5),
        accept_length=accept,
        requests=20,
        errors=0,
    )


def _write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / f"Pulumi.{name}.yaml").write_text(text)
    return tmp_path


def test_render_prints_the_command_the_plan_and_the_findings():
    result = _cli("render", "eagle3-bs128")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Stack eagle3-bs128, SGLang 0.5.8" in out
    command_line = out.splitlines()[out.splitlines().index("Launch command:") + 1].strip()
    words = shlex.split(command_line)
    assert words[:3] == ["python", "-m", "sglang.launch_server"]
    assert "--cuda-graph-max-bs" in words
    assert "Verdict: fits at mem_fraction_static 0.88" in out
    assert "Preflight: 0 error(s)" in out
    # The GPUs it was judged on, and whence: the emulator host's own facts here.
    facts = out.splitlines()[out.splitlines().index("GPU facts (the emulator host's):") + 1]
    assert (
        facts.strip()
        == "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887 MiB each, compute capability 12.0, pcie"
    )


@pytest.mark.parametrize("stack", ["baseline", "eagle3-bs128", "eagle3-auto-mem", "custom-allreduce"])
def test_render_counts_exactly_the_findings_it_lists(stack):
    out = _cli("render", stack).stdout
    counted = re.search(r"^Preflight: (\d+) error\(s\), (\d+) warning\(s\), (\d+) info$", out, re.MULTILINE)
    assert counted, out
    listed = re.findall(r"^  \[(error|warning|info)\] ", out, re.MULTILINE)

    assert [int(n) for n in counted.groups()] == [listed.count(kind) for kind in ("error", "warning", "info")]


def test_help_names_the_command_a_user_types():
    result = _cli("--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: sglang-stacks ")
    assert "python -m" not in result.stdout


def test_render_for_another_release_maps_the_renamed_flag():
    result = _cli("render", "eagle3-bs128", "--release", "0.5.23", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["release"] == "0.5.23"
    assert document["pinned_release"] == "0.5.8"
    assert "--cuda-graph-max-bs-decode" in document["argv"]
    assert "--cuda-graph-max-bs" not in document["argv"]
    assert "release-mismatch" in [f["code"] for f in document["findings"]]
    assert document["memory"]["release"] == "0.5.23" and document["memory"]["verdict"] == "fits"


def test_doomed_stack_exits_1_with_the_error_and_its_fix():
    result = _cli("render", "eagle3-auto-mem")
    assert result.returncode == 1
    assert "[error] memory-does-not-fit" in result.stdout
    assert "fix: Set mem_fraction_static to 0.77 or more (up to 0.97 fits)." in result.stdout
    # render names the release whose memory rules made the plan, and SGLang's own message.
    assert "Memory plan (per GPU, SGLang 0.5.8):" in result.stdout
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static" in result.stdout


def test_json_document_of_a_doomed_stack():
    result = _cli("render", "flashinfer-fusion", "--json")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert "--enable-flashinfer-allreduce-fusion" in document["argv"]
    errors = [f for f in document["findings"] if f["severity"] == "error"]
    assert [e["code"] for e in errors] == ["sm120-flashinfer-allreduce-fusion"]
    assert set(errors[0]) == {"severity", "code", "key", "message", "fix"}
    assert document["memory"]["verdict"] in {"fits", "does_not_fit", "unknown"}


def test_stack_whose_flags_a_release_cannot_take_has_no_command(capsys):
    assert main(["render", "ep-a2a", "--release", "0.5.8", "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["argv"] is None and document["command"] is None
    assert "flag-unrenderable" in [f["code"] for f in document["findings"]]


def test_environment_variables_prefix_the_command(capsys):
    assert main(["render", "nccl-tree"]) == 1
    assert "NCCL_ALGO=Tree python -m sglang.launch_server" in capsys.readouterr().out


def test_secrets_are_listed_by_name_and_never_printed(tmp_path, capsys):
    stacks = _write(tmp_path, "mine", STACK)
    assert main(["render", "mine", "--json", "--stacks-dir", str(stacks)]) == 0
    out = capsys.readouterr().out
    assert "c2VjcmV0LWtleS1jaXBoZXJ0ZXh0" not in out
    assert json.loads(out)["secrets_set"] == ["sshPrivateKey"]


def test_secret_inside_a_section_is_bad_input(tmp_path, capsys):
    text = STACK.replace("    path: /models/m\n", "    path:\n      secure: v1:abc\n")
    stacks = _write(tmp_path, "leaky", text)
    assert main(["render", "leaky", "--stacks-dir", str(stacks)]) == 2
    err = capsys.readouterr().err
    assert "sglang-stacks:model.path hold secrets inside a section" in err
    assert "v1:abc" not in err


def test_missing_stack_is_bad_input_listing_the_stacks():
    result = _cli("render", "no-such-stack")
    assert result.returncode == 2
    assert "There is no stack file Pulumi.no-such-stack.yaml" in result.stderr
    assert "eagle3-bs128" in result.stderr


def test_invalid_config_is_bad_input_naming_the_key(tmp_path, capsys):
    stacks = _write(tmp_path, "typo", STACK.replace("tp_size: 2", "tp_sise: 2"))
    assert main(["render", "typo", "--stacks-dir", str(stacks)]) == 2
    assert "sglang-stacks:server.tp_sise: unknown key" in capsys.readouterr().err


def test_malformed_yaml_is_bad_input(tmp_path, capsys):
    stacks = _write(tmp_path, "broken", "config:\n  sglang-stacks:host: [unclosed\n")
    assert main(["render", "broken", "--stacks-dir", str(stacks)]) == 2
    assert "is not valid YAML" in capsys.readouterr().err


def test_a_yaml_error_names_the_file_the_line_and_the_fix(tmp_path, capsys):
    # A key indented one space short of its neighbours, the commonest slip in a stack file.
    text = "config:\n  sglang-stacks:server:\n    tp_size: 8\n   cuda_graph_max_bs: 128\n"
    stacks = _write(tmp_path, "misindented", text)

    assert main(["render", "misindented", "--stacks-dir", str(stacks)]) == 2

    said = capsys.readouterr().err
    assert f"{stacks.name}/Pulumi.misindented.yaml, line 4, column 4, is not valid YAML:" in said
    assert "\n       cuda_graph_max_bs: 128\n       ^\n" in said
    assert "Line the keys of one section up under each other" in said
    assert "<unicode string>" not in said


def test_stack_name_with_a_path_is_refused(capsys):
    assert main(["render", "../etc/passwd"]) == 2
    assert "is not a stack name" in capsys.readouterr().err


def test_unknown_command_and_missing_arguments_exit_2():
    assert _cli("deploy", "baseline").returncode == 2
    assert _cli("render").returncode == 2


def test_schema_command_prints_the_committed_schema():
    result = _cli("schema")
    assert result.returncode == 0
    assert json.loads(result.stdout) == json.loads((STACKS_DIR / "schema.json").read_text())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_registered_command_has_help(name):
    result = _cli(name, "--help")
    assert result.returncode == 0
    assert COMMANDS[name].help.split(",")[0] in result.stdout.replace("\n", " ")


@pytest.mark.parametrize("release", known_releases())
def test_render_works_for_every_shipped_release(release, capsys):
    code = main(["render", "baseline-bs128", "--release", release, "--json"])
    document = json.loads(capsys.readouterr().out)
    # 0.5.1 and 0.5.2 reserve more by default: their own fraction leaves Kimi-K2.5 no KV cache here.
    errors = [f["code"] for f in document["findings"] if f["severity"] == "error"]
    assert errors in ([], ["memory-does-not-fit"]) and code == (1 if errors else 0)
    assert document["memory"]["release"] == release
    graph_option = (
        "--cuda-graph-max-bs" if release_key(release) < (0, 5, 14, 0) else "--cuda-graph-max-bs-decode"
    )
    assert document["release"] == release
    assert document["argv"][document["argv"].index(graph_option) + 1] == "128"


@pytest.mark.parametrize("release", recorded_releases())
def test_render_of_the_shipped_baseline_gives_each_releases_own_numbers(release, capsys):
    # baseline (Kimi-K2.5 with its vision tower at tp 8 on 96 GB GPUs, graphs up to 512, the rest
    # the release's choice) is a point of the grid every release's own ServerArgs was run over.
    point = GridPoint(97887, 8, None, 512, None, False, "mla-vision")
    theirs = recorded_rows(release)[GRID.index(point)].values
    assert theirs is not None

    main(["render", "baseline", "--release", release])
    said = capsys.readouterr().out
    main(["render", "baseline", "--release", release, "--json"])
    plan = json.loads(capsys.readouterr().out)["memory"]
    heading = f"Memory plan (per GPU, SGLang {release}"
    unrun = pool_code(release) != PLANNED_WITH and plan.get("tokens_from") is None  # or it refused
    approximated = "; its KV pool approximated: kv-pool-approximated below" if unrun else ""
    assert f"{heading}{approximated}):" in said

    assert plan["release"] == release and plan["fraction_source"] == "auto"
    if release_key(release) >= (0, 5, 9, 0):
        # The release serves Kimi-K2.5 (baseline's model.config): its own code resolved the launch
        # with the model's real config.json, not the grid's Kimi-VL-shaped stand-in.
        assert plan["settings_from"].startswith(f"SGLang {release}'s own code")
        return
    assert plan["settings_from"].startswith(f"the project's rules for SGLang {release}")
    assert plan["mem_fraction_static"] == pytest.approx(theirs["mem_fraction_static"], abs=5e-5)
    for key in ("chunked_prefill_size", "max_prefill_tokens", "cuda_graph_max_bs"):
        assert plan[key] == theirs[key], key


def test_render_for_a_release_without_a_table_names_the_nearest_ones(capsys):
    assert main(["render", "baseline", "--release", "0.5.24", "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["argv"] is None
    finding = next(f for f in document["findings"] if f["code"] == "release-unknown")
    assert "0.5.23" in finding["fix"] and "python -m sglang_flags.regenerate 0.5.24" in finding["fix"]


def test_history_prints_a_table_and_writes_the_plot(tmp_path, capsys):
    db = tmp_path / "history.sqlite"
    t0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    history.record(db, "baseline", "0123456789abcdef", "0.5.8", "x", _result(89.5), t0)
    later = t0 + timedelta(hours=1)
    history.record(db, "eagle3-bs128", "fedcba9876543210", "0.5.8", "x", _result(54.1, 2.43), later)
    png = tmp_path / "tok_s.png"

    assert main(["history", "--db", str(db), "--plot", str(png)]) == 0

    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["recorded", "(UTC)", "stack"]
    assert lines[1].split() == [
        "2026-11-29", "09:00", "baseline", "0.5.8", "89.5", "89.0-90.0", "-", "42.0", "0/20", "0123456789ab",
    ]  # fmt: skip
    assert "2.43" in lines[2]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"Wrote the tok/s plot to {png}." in out
    assert main(["history", "eagle3-bs128", "--db", str(db)]) == 0
    assert [line.split()[2] for line in capsys.readouterr().out.splitlines()[1:]] == ["eagle3-bs128"]


def test_history_with_nothing_recorded_says_how_to_get_results(tmp_path, capsys):
    assert main(["history", "baseline", "--db", str(tmp_path / "none.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "No benchmark results are recorded for baseline" in out
    assert "pulumi up -s <stack>" in out
    assert not (tmp_path / "none.sqlite").exists()


def test_commands_load_no_plotting_statistics_pulumi_or_http_library_until_they_need_one():
    modules = "sglang_stacks.cli, sglang_stacks.results.plot, sglang_loadgen.contract"
    check = (
        f"import sys, {modules}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'scipy', 'pulumi', 'httpx'}))"
    )
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_number_set_with_pulumi_config_set_path_renders_as_that_number(workspace):
    """`pulumi config set --path` stores its value as text; the tool reads it as the knob's type."""
    workspace.init_stack(
        "quoted",
        "config:\n  sglang-stacks:host: {kind: emulator}\n"
        "  sglang-stacks:model: {path: /models/m, weights_per_gpu_gb: 20}\n"
        "  sglang-stacks:server: {tp_size: 2, disable_custom_all_reduce: true}\n",
    )
    workspace.run(
        "config", "set", "--path", "sglang-stacks:server.mem_fraction_static", "0.85", "-s", "quoted"
    )
    workspace.run("config", "set", "--path", "sglang-stacks:server.cuda_graph_max_bs", "96", "-s", "quoted")
    stored = (workspace.path / "stacks" / "Pulumi.quoted.yaml").read_text()
    assert 'mem_fraction_static: "0.85"' in stored  # as Pulumi keeps it
    rendered = workspace.cli("render", "quoted", "--json", check=True)
    argv = json.loads(rendered.stdout)["argv"]
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.85"
    assert argv[argv.index("--cuda-graph-max-bs") + 1] == "96"
    workspace.run("config", "set", "--path", "sglang-stacks:server.cuda_graph_max_bs", "lots", "-s", "quoted")
    refused = workspace.cli("render", "quoted")
    assert refused.returncode != 0
    assert "sglang-stacks:server.cuda_graph_max_bs: 'lots' is not allowed; expected integer" in refused.stderr


def test_render_and_preview_refuse_a_stack_that_names_no_host(workspace):
    workspace.init_stack(
        "hostless",
        "config:\n  sglang-stacks:model: {path: /models/m, weights_per_gpu_gb: 20}\n"
        "  sglang-stacks:server: {tp_size: 2, disable_custom_all_reduce: true}\n",
    )
    rendered = workspace.cli("render", "hostless")
    assert rendered.returncode != 0
    assert "sglang-stacks:host.kind is missing" in rendered.stderr
    previewed = workspace.run("preview", "-s", "hostless", check=False)
    assert previewed.returncode != 0
    assert "sglang-stacks:host.kind is missing" in previewed.stdout + previewed.stderr
    # Nothing was deployed: the stack has no resources.
    assert workspace.deployment("hostless").get("resources") in (None, [])


@pytest.mark.parametrize("secret", ["sshPrivateKey", "hubToken"])
def test_a_secret_under_the_demo_passphrase_is_refused_before_anything_runs(workspace, secret):
    demo = {"PULUMI_CONFIG_PASSPHRASE": "sglang-stacks-demo"}
    workspace.extra_env.update(demo)
    workspace.init_stack("mine", STACK.split("  sglang-stacks:sshPrivateKey")[0])
    workspace.run("config", "set", "--secret", f"sglang-stacks:{secret}", "not-for-anyone", "-s", "mine")
    previewed = workspace.run("preview", "-s", "mine", check=False)
    said = previewed.stdout + previewed.stderr
    assert previewed.returncode != 0
    assert f"holds sglang-stacks:{secret} under the demo passphrase" in said
    assert "PULUMI_CONFIG_PASSPHRASE_FILE" in said and "not-for-anyone" not in said
    # Under a passphrase of the user's own, the same stack previews.
    workspace.extra_env["PULUMI_CONFIG_PASSPHRASE"] = "mine"
    workspace.run("stack", "rm", "--yes", "--force", "-s", "mine")  # its stack file goes too
    workspace.init_stack("mine", STACK.split("  sglang-stacks:sshPrivateKey")[0])
    workspace.run("config", "set", "--secret", f"sglang-stacks:{secret}", "not-for-anyone", "-s", "mine")
    assert "under the demo passphrase" not in workspace.run("preview", "-s", "mine", check=False).stdout


@pytest.mark.parametrize("command", [("render", "eagle3-bs128"), ("schema",), ("--help",)])
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(command):
    """`sglang-stacks render ... | head`: the reader went away, which is no failure of the command."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # a reader that has gone before the first line
    done = subprocess.run(
        [sys.executable, "-m", "sglang_stacks.cli", *command],
        cwd=REPO, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
    )  # fmt: skip
    os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")
