import os
import re
import shlex
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from sglang_flags import build_parser, known_releases, load_table, parser, release_key
from sglang_flags.regenerate import describe_parser
from sglang_flags.renames import spellings
from sglang_stacks.config.findings import Finding
from sglang_stacks.config.flags import AttentionBackend, MoeA2ABackend, ServerFlags, SpeculativeAlgorithm
from sglang_stacks.config.render import flag_problems, render_argv, render_command, resolve_flag
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_stacks.errors import FlagError
from tests._stacks import STACKS_DIR

RELEASES = known_releases()
REPO = Path(__file__).resolve().parent.parent

# The campaign's launch command (DESIGN.md), as typed flags.
CAMPAIGN = ServerFlags(
    model_path="/shared/kimi-k2.5-int4",
    port=30000,
    tp_size=8,
    trust_remote_code=True,
    host="0.0.0.0",
    cuda_graph_max_bs=128,
    disable_custom_all_reduce=True,
    speculative_algorithm="EAGLE",
    speculative_draft_model_path="/data/eagle3/output_100k_sglang/4",
    speculative_num_steps=2,
    speculative_eagle_topk=4,
    speculative_num_draft_tokens=4,
)


def _parse(argv: list[str], release: str) -> dict[str, typing.Any]:
    return vars(build_parser(release).parse_args(argv))


def test_campaign_command_renders_with_canonical_names_on_0_5_8():
    assert render_argv(CAMPAIGN, "0.5.8") == [
        "--model-path", "/shared/kimi-k2.5-int4",
        "--trust-remote-code",
        "--host", "0.0.0.0",
        "--port", "30000",
        "--tensor-parallel-size", "8",
        "--cuda-graph-max-bs", "128",
        "--disable-custom-all-reduce",
        "--speculative-algorithm", "EAGLE",
        "--speculative-draft-model-path", "/data/eagle3/output_100k_sglang/4",
        "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "4",
        "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip


@pytest.mark.parametrize("release", RELEASES)
def test_campaign_command_parses_to_the_same_values_on_every_release(release):
    parsed = _parse(render_argv(CAMPAIGN, release), release)
    tp_dest = resolve_flag("tp_size", release).dest
    graph_dest = resolve_flag("cuda_graph_max_bs", release).dest
    assert parsed[tp_dest] == 8
    assert parsed[graph_dest] == 128
    assert parsed["speculative_num_draft_tokens"] == 4
    assert parsed["disable_custom_all_reduce"] is True


@pytest.mark.parametrize("release", RELEASES)
def test_cuda_graph_max_bs_takes_the_spelling_of_each_release(release):
    # 0.5.14 split the flag by phase; the old one was the decode graph's.
    expected = "--cuda-graph-max-bs" if release_key(release) < (0, 5, 14, 0) else "--cuda-graph-max-bs-decode"
    argv = render_argv(ServerFlags(model_path="/m", cuda_graph_max_bs=96), release)
    assert argv[2:] == [expected, "96"]
    assert _parse(argv, release)[resolve_flag("cuda_graph_max_bs", release).dest] == 96


def test_cuda_graph_max_bs_is_mapped_to_the_decode_flag_on_0_5_23():
    flags = ServerFlags(model_path="/m", cuda_graph_max_bs=128)
    assert "--cuda-graph-max-bs" in render_argv(flags, "0.5.8")
    argv = render_argv(flags, "0.5.23")
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "128"
    assert "--cuda-graph-max-bs" not in argv
    # Why the mapping matters: the old spelling is an ambiguous prefix on 0.5.23.
    with pytest.raises(SystemExit) as exit_:
        build_parser("0.5.23").parse_args(["--model-path", "/m", "--cuda-graph-max-bs", "128"])
    assert exit_.value.code == 2


@pytest.mark.parametrize(
    ("release", "option"), [("0.5.8", "--tensor-parallel-size"), ("0.5.23", "--tp-size")]
)
def test_tp_size_uses_the_releases_canonical_spelling(release, option):
    assert render_argv(ServerFlags(model_path="/m", tp_size=2), release)[2:] == [option, "2"]


# Typed fields a release lacks, and the first release that has them; every other field must
# resolve on every shipped release.
FIRST_RELEASE_WITH = {"enable_torch_symm_mem": "0.5.3"}


@pytest.mark.parametrize("release", RELEASES)
def test_every_typed_field_resolves_or_is_reported_unavailable_on_every_release(release):
    for name in ServerFlags.model_fields:
        if name == "extra_flags":
            continue
        since = FIRST_RELEASE_WITH.get(name)
        if since is not None and release_key(release) < release_key(since):
            with pytest.raises(FlagError, match=rf"SGLang {re.escape(release)} has no launch flag '{name}'"):
                resolve_flag(name, release)
        else:
            assert resolve_flag(name, release).dest in spellings(name)


def test_a_typed_switch_the_release_lacks_is_an_error_when_set_and_nothing_when_not():
    assert "--enable-torch-symm-mem" in render_argv(
        ServerFlags(model_path="/m", enable_torch_symm_mem=True), "0.5.3"
    )
    assert render_argv(ServerFlags(model_path="/m", enable_torch_symm_mem=False), "0.5.1") == [
        "--model-path",
        "/m",
    ]
    with pytest.raises(FlagError, match=r"SGLang 0\.5\.1 has no launch flag 'enable_torch_symm_mem'"):
        render_argv(ServerFlags(model_path="/m", enable_torch_symm_mem=True), "0.5.1")


def test_unknown_extra_flag_names_the_nearest_real_flags():
    flags = ServerFlags(model_path="/m", extra_flags={"--schedul-policy": "lpm"})
    with pytest.raises(FlagError) as error:
        render_argv(flags, "0.5.8")
    assert "'--schedul-policy'" in str(error.value)
    assert "--schedule-policy" in str(error.value)


def test_prefix_abbreviations_are_not_accepted_as_flag_names():
    # argparse would take --tp; rendering insists on a real option so nothing is ambiguous later.
    with pytest.raises(FlagError, match="nearest names"):
        resolve_flag("--tp", "0.5.8")


def test_flag_gone_in_a_release_without_a_mapping_is_an_error_not_a_drop():
    flags = ServerFlags(model_path="/m", extra_flags={"enable_piecewise_cuda_graph": True})
    assert "--enable-piecewise-cuda-graph" in render_argv(flags, "0.5.8")
    with pytest.raises(FlagError, match=r"SGLang 0\.5\.23 has no launch flag 'enable_piecewise_cuda_graph'"):
        render_argv(flags, "0.5.23")


def test_a_choice_the_release_lacks_is_an_error_naming_the_allowed_values():
    flags = ServerFlags(model_path="/m", moe_a2a_backend="flashinfer")
    assert render_argv(flags, "0.5.23")[-2:] == ["--moe-a2a-backend", "flashinfer"]
    with pytest.raises(FlagError) as error:
        render_argv(flags, "0.5.8")
    assert "none, deepep, mooncake, ascend_fuseep" in str(error.value)


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ({"schedule_conservativeness": "high"}, "takes a number"),
        ({"max_total_tokens": 1.5}, "takes an integer"),
        ({"enable_mixed_chunk": "yes"}, "is a switch"),
        ({"schedule_policy": True}, "takes a value, not true/false"),
        ({"schedule_policy": ["lpm", "fcfs"]}, "takes one value, not a list"),
        ({"schedule_policy": "random-guess"}, "accepts only"),
    ],
)
def test_extra_flag_values_are_checked_against_the_table(extra, complaint):
    with pytest.raises(FlagError, match=complaint):
        render_argv(ServerFlags(model_path="/m", extra_flags=extra), "0.5.8")


def test_extra_flags_render_lists_and_switches():
    flags = ServerFlags(model_path="/m", extra_flags={"cuda_graph_bs": [1, 2, 4], "enable_mixed_chunk": True})
    argv = render_argv(flags, "0.5.8")
    assert argv[2:] == ["--cuda-graph-bs", "1", "2", "4", "--enable-mixed-chunk"]
    assert _parse(argv, "0.5.8")["cuda_graph_bs"] == [1, 2, 4]
    assert render_argv(flags, "0.5.23")[2:5] == ["--cuda-graph-bs-decode", "1", "2"]


def test_extra_switch_set_false_renders_nothing():
    assert render_argv(ServerFlags(model_path="/m", extra_flags={"enable_mixed_chunk": False}), "0.5.8") == [
        "--model-path",
        "/m",
    ]


@pytest.mark.parametrize("key", ["mem_fraction_static", "--mem-fraction-static", "--tensor-parallel-size"])
def test_extra_flags_may_not_repeat_a_typed_field(key):
    with pytest.raises(ValidationError, match="typed flags"):
        ServerFlags(extra_flags={key: 1})


def test_an_alias_of_a_typed_flag_is_reported_as_a_duplicate():
    flags = ServerFlags(model_path="/m", extra_flags={"--model": "/other"})
    with pytest.raises(FlagError, match=r"same SGLang 0\.5\.8 flag"):
        render_argv(flags, "0.5.8")


def test_every_problem_is_listed_at_once_as_preflight_findings_are():
    flags = ServerFlags(extra_flags={"nope_one": 1, "nope_two": 2})
    problems = flag_problems(flags, "0.5.8")
    assert [p.key for p in problems] == ["nope_one", "nope_two", "model_path"]
    # One record of a problem and its fix: the renderer's are preflight's Finding.
    assert all(
        isinstance(p, Finding) and (p.severity, p.code) == ("error", "flag-unrenderable") for p in problems
    )
    assert problems[2].fix == "Set model.path in the stack, or server.model_path."


@pytest.mark.parametrize(
    ("release", "nearest"),
    [("0.4.0", "0.5.1"), ("0.5.24", "0.5.23"), ("0.5.8.post7", "0.5.8.post1 or 0.5.9")],
)
def test_unknown_release_is_an_error_naming_the_nearest_shipped_ones(release, nearest):
    with pytest.raises(FlagError, match=rf"nearest release with one \({re.escape(nearest)}\)"):
        render_argv(CAMPAIGN, release)


def test_value_that_looks_like_an_option_is_attached():
    argv = render_argv(ServerFlags(model_path="-odd-folder"), "0.5.8")
    assert argv == ["--model-path=-odd-folder"]
    assert _parse(argv, "0.5.8")["model_path"] == "-odd-folder"


def test_render_command_is_shell_safe():
    flags = ServerFlags(model_path="/models/my model; rm -rf ~", tp_size=2)
    command = render_command(flags, "0.5.8", python="/opt/venv/bin/python", env={"NCCL_ALGO": "Ring"})
    words = shlex.split(command)
    assert words[0] == "NCCL_ALGO=Ring"
    assert words[1:4] == ["/opt/venv/bin/python", "-m", "sglang.launch_server"]
    assert words[4:] == render_argv(flags, "0.5.8")
    out = subprocess.run(
        ["sh", "-c", "printf '%s\\n' " + command.split(" ", 1)[1]], capture_output=True, text=True
    )
    assert "/models/my model; rm -rf ~" in out.stdout.splitlines()


def _choices(dest: str, releases: list[str]) -> set[typing.Any]:
    found: set[typing.Any] = set()
    for release in releases:
        found |= set(resolve_flag(dest, release).choices or ())
    return found


def test_closed_sets_are_the_union_of_the_release_tables():
    assert set(typing.get_args(MoeA2ABackend)) == _choices("moe_a2a_backend", RELEASES)
    assert set(typing.get_args(AttentionBackend)) == _choices("attention_backend", RELEASES)
    assert set(typing.get_args(SpeculativeAlgorithm)) == _choices("speculative_algorithm", ["0.5.8"])


STACKS = sorted(
    p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS_DIR.glob("Pulumi.*.yaml")
)
# Stacks whose flags a release cannot take, and why: everything else must render and parse.
# The flashinfer all-to-all backend arrived in 0.5.9, torch symmetric memory in 0.5.3.
UNRENDERABLE = {
    ("ep-a2a", release): "moe_a2a_backend" for release in RELEASES if release_key(release) < (0, 5, 9, 0)
} | {
    ("symm-mem", release): "enable_torch_symm_mem"
    for release in RELEASES
    if release_key(release) < (0, 5, 3, 0)
}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("stack", STACKS)
def test_shipped_stacks_render_argv_the_release_parser_accepts(stack, release):
    flags = load_stack_spec(stack, STACKS_DIR).launch_flags()
    if (stack, release) in UNRENDERABLE:
        with pytest.raises(FlagError, match=UNRENDERABLE[stack, release]):
            render_argv(flags, release)
        return
    parsed = _parse(render_argv(flags, release), release)
    for name, value in flags.typed_values().items():
        if value is not False:  # an unset switch renders nothing, on releases that lack it too
            assert parsed[resolve_flag(name, release).dest] == value, name


def test_campaign_stacks_are_all_shipped():
    assert len(STACKS) >= 10
    assert {"baseline", "baseline-bs128", "eagle3-bs512", "eagle3-bs128", "eagle3-auto-mem"} <= set(STACKS)


@pytest.mark.parametrize("release", RELEASES)
def test_describe_parser_keeps_every_option_of_a_parser(release):
    described = describe_parser(build_parser(release))
    table = load_table(release)
    expected = [(f.flags, f.dest) for f in table.flags if f.action != "_HelpAction"]
    assert [(tuple(d["flags"]), d["dest"]) for d in described if d["dest"] != "help"] == expected


def test_regenerate_builds_a_table_from_an_installed_sglang(tmp_path):
    # A stand-in SGLang package, installed the way pip would lay it out, with SGLang's entry point.
    package = tmp_path / "sglang" / "srt"
    package.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "server_args.py").write_text(
        "import json\n"
        "class ServerArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(parser):\n"
        "        parser.add_argument('--model-path', '--model', type=str, dest='model_path')\n"
        "        parser.add_argument('--tp-size', type=int, default=1)\n"
        "        parser.add_argument('--json-arg', type=json.loads, default={'a': 1})\n"
        "        parser.add_argument('--policy', choices=['lpm', 'fcfs'], default='fcfs')\n"
        "        parser.add_argument('--enable-x', action='store_true')\n"
        "        parser.add_argument('--bs', type=int, nargs='+')\n"
    )
    info = tmp_path / "sglang-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n")
    out = tmp_path / "table.json"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    result = subprocess.run(
        [sys.executable, "-m", "sglang_flags.regenerate", "--output", str(out)],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    import json

    table = json.loads(out.read_text())
    assert table["sglang_version"] == "9.9.9"
    rows = {tuple(f["flags"]): f for f in table["flags"]}
    assert rows["--model-path", "--model"]["dest"] == "model_path"
    assert rows[("--tp-size",)] == {
        "flags": ["--tp-size"],
        "dest": "tp_size",
        "type": "int",
        "choices": None,
        "default": 1,
        "nargs": None,
        "action": "_StoreAction",
    }
    assert rows[("--json-arg",)]["type"] == "loads"
    assert rows[("--json-arg",)]["default"] == {"a": 1}
    assert rows[("--policy",)]["choices"] == ["lpm", "fcfs"]
    assert rows[("--enable-x",)]["nargs"] == 0
    assert rows[("--enable-x",)]["action"] == "_StoreTrueAction"
    assert rows[("--bs",)]["nargs"] == "+"


def test_regenerate_says_how_to_run_it_without_sglang(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "sglang_flags.regenerate", "--output", "-"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "Run this with SGLang's Python" in result.stderr


def test_render_command_refuses_a_variable_name_a_shell_would_run():
    with pytest.raises(FlagError, match="cannot be environment variable names"):
        render_command(CAMPAIGN, "0.5.8", env={"X=1; reboot; Y": "1"})


@pytest.mark.parametrize("release", ["0.5.1", "0.5.8", "0.5.23"])
def test_the_shared_parser_reads_every_argv_as_a_parser_of_its_own_would(release):
    """Judging a campaign's thousands of launches parses them all with one parser per release
    (building one costs more than the rest of judging a launch): a parse, or a refusal, must leave
    nothing behind that changes how the next argv reads."""
    listed = next(f.flags[0] for f in load_table(release).flags if f.nargs in ("+", "*") and f.type == "int")
    argvs = [
        ["--model-path", "/m", listed, "1", "2", "4"],
        ["--model-path", "/m", "--tp-size", "8", "--mem-fraction-static", "0.8"],
        ["--model-path", "/m", "--tp-size", "eight"],
        ["--model-path", "/m", "--disable-custom-all-reduce"],
        ["--model-path", "/m"],
    ]
    assert parser(release) is parser(release)
    for argv in argvs:
        try:
            shared: dict[str, typing.Any] | str = vars(parser(release).parse_args(argv))
        except SystemExit as refused:
            shared = f"refused ({refused.code})"
        try:
            fresh: dict[str, typing.Any] | str = vars(build_parser(release).parse_args(argv))
        except SystemExit as refused:
            fresh = f"refused ({refused.code})"
        assert shared == fresh, argv
    assert vars(parser(release).parse_args(["--model-path", "/m"]))["mem_fraction_static"] is None
