"""Comparing stacks the way the campaign did."""

from __future__ import annotations

import ast
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sglang_stacks.config.recorded import values_from_argv
from sglang_stacks.errors import SpecError
from sglang_stacks.exits import ExitCode
from sglang_stacks.results import compare, stats
from sglang_stacks.results.stats import BenchmarkResult, Noise, Percentiles

COMMON = [
    "python", "-m", "sglang.launch_server", "--model-path", "/shared/kimi-k2.5-int4", "--port", "30000",
    "--tp-size", "8", "--trust-remote-code", "--host", "0.0.0.0", "--disable-custom-all-reduce",
]  # fmt: skip
EAGLE3 = [
    "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/data/eagle3/output_100k_sglang/4",
    "--speculative-num-steps", "2", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "4",
]  # fmt: skip


def result(runs: Sequence[float], accept: float | None = None, **changes: Any) -> BenchmarkResult:
    low, high = stats.ci95(runs)
    fields: dict[str, Any] = {
        "concurrency": 1,
        "input_len": 128,
        "output_len": 256,
        "repetitions": len(runs),
        "tok_s_mean": round(stats.mean(runs), 3),
        "tok_s_stdev": round(stats.stdev(runs), 3),
        "tok_s_ci95": (round(low, 3), round(high, 3)),
        "tok_s_runs": tuple(runs),
        "ttft_ms": Percentiles(p50=40.0, p90=44.0, p99=48.0),
        "tpot_ms": Percentiles(p50=11.1, p90=11.3, p99=11.8),
        "itl_ms": Percentiles(p50=11.0, p90=11.6, p99=13.0),
        "accept_length": accept,
        "requests": 20,
        "errors": 0,
    }
    fields.update(changes)
    return BenchmarkResult(**fields)


def outputs(argv_tail: list[str], benchmark: BenchmarkResult, version: str = "0.5.8") -> dict[str, Any]:
    # The shape `pulumi stack output --json` prints.
    argv = COMMON + argv_tail
    return {
        "tok_s": benchmark.tok_s_mean,
        "benchmark": benchmark.model_dump(mode="json"),
        "launch_command": " ".join(argv),
        "launch_flags": values_from_argv(argv[3:], version),
        "sglang_version": version,
        "server_log": "/var/tmp/sglang-stacks/logs/baseline.log",
    }


BASELINE_RUNS = [89.1, 89.9, 89.4, 89.7, 89.4]
EAGLE3_RUNS = [54.3, 53.8, 54.2, 54.0, 54.2]


def campaign() -> dict[str, dict[str, Any]]:
    return {
        "baseline": outputs(["--cuda-graph-max-bs", "512"], result(BASELINE_RUNS)),
        "eagle3-bs128": outputs(
            ["--cuda-graph-max-bs", "128", "--mem-fraction-static", "0.88", *EAGLE3],
            result(EAGLE3_RUNS, accept=2.43),
        ),
    }


def test_the_campaign_verdict_is_about_forty_percent_slower_and_significant() -> None:
    comparison = compare.compare(campaign())
    (verdict,) = comparison.verdicts
    assert verdict.change_pct == pytest.approx(-39.6, abs=0.1)
    assert verdict.significant and verdict.p_value is not None and verdict.p_value < 1e-6
    assert verdict.line == "eagle3-bs128 is 39.6 % slower than baseline (significant, p<0.001)"
    assert comparison.exit_code == ExitCode.REGRESSION


def test_flags_show_only_the_differences_by_default() -> None:
    comparison = compare.compare(campaign())
    rows = {row.flag: row.values for row in comparison.flags}
    assert rows["--cuda-graph-max-bs"] == {"baseline": 512, "eagle3-bs128": 128}
    assert rows["--speculative-algorithm"] == {"baseline": None, "eagle3-bs128": "EAGLE"}
    assert "--model-path" not in rows and "--trust-remote-code" not in rows
    everything = {row.flag: row for row in compare.compare(campaign(), all_flags=True).flags}
    assert everything["--trust-remote-code"].values == {"baseline": True, "eagle3-bs128": True}
    assert not everything["--trust-remote-code"].differs
    assert everything["--cuda-graph-max-bs"].differs


def test_the_table_reads_like_the_campaign_notes() -> None:
    table = compare.format_table(compare.compare(campaign()))
    lines = table.splitlines()
    assert lines[0].split() == ["flag", "(differences", "only)", "baseline", "eagle3-bs128"]
    assert ["--cuda-graph-max-bs", "512", "128"] in [line.split() for line in lines]
    assert ["--disable-custom-all-reduce"] not in [line.split()[:1] for line in lines]
    assert ["tok/s", "89.5", "54.1", "(-39.6", "%)"] in [line.split() for line in lines]
    assert ["accept", "length", "-", "2.43"] in [line.split() for line in lines]
    assert lines[-1] == "eagle3-bs128 is 39.6 % slower than baseline (significant, p<0.001)"


def test_json_for_scripts_and_the_exit_code_for_ci() -> None:
    out, err = io.StringIO(), io.StringIO()
    loaded = campaign()
    code = compare.main_compare(["baseline", "eagle3-bs128"], loaded.__getitem__, True, out=out, err=err)
    assert code == 1 and err.getvalue() == ""
    document = json.loads(out.getvalue())
    assert document["exit_code"] == 1
    assert document["verdicts"][0]["stack"] == "eagle3-bs128"
    tok_s = next(m for m in document["metrics"] if m["metric"] == "tok/s")
    assert tok_s["change_pct"]["eagle3-bs128"] == pytest.approx(-39.55, abs=0.05)


def test_overlapping_runs_are_not_significant_and_pass() -> None:
    stacks = {
        "baseline": outputs([], result([89.0, 90.0, 88.0, 91.0, 89.5])),
        "baseline-rerun": outputs([], result([88.5, 90.5, 87.5, 90.0, 89.0])),
    }
    comparison = compare.compare(stacks)
    assert not comparison.verdicts[0].significant
    assert "(within noise, p=0." in comparison.verdicts[0].line
    assert comparison.exit_code == 0
    assert "(the launch flags are identical)" in compare.format_table(comparison)


def test_one_server_on_two_hosts_is_within_noise_and_a_launch_floor_can_be_declared() -> None:
    # The same configuration on two hosts: 0.2 % apart, each launch's repetitions within 0.02 %.
    stacks = {
        "gpu-a": outputs([], result([88.31, 88.29, 88.33])),
        "gpu-b": outputs([], result([88.10, 88.12, 88.08])),
    }

    comparison = compare.compare(stacks)

    assert not comparison.verdicts[0].significant and comparison.exit_code == 0
    assert comparison.verdicts[0].line.startswith("gpu-b is 0.2 % slower than gpu-a (within noise, p=")
    assert comparison.verdicts[0].margin_pct == pytest.approx(2.77, abs=0.01)
    # Hosts declared steadier than the default: the floor and the margin shrink, and 0.2 % shows.
    steady = compare.compare(stacks, noise=Noise(launch_cv_pct=0.01))
    assert steady.verdicts[0].significant and steady.exit_code == 1


def test_tolerance_lets_a_small_significant_slowdown_pass() -> None:
    stacks = {
        "baseline": outputs([], result(BASELINE_RUNS)),
        "slightly-slower": outputs([], result([r * 0.95 for r in BASELINE_RUNS])),
    }
    assert compare.compare(stacks).exit_code == 1
    assert compare.compare(stacks, tolerance_pct=6).exit_code == 0


def test_faster_stacks_and_three_way_comparisons_use_the_first_as_reference() -> None:
    stacks = {
        "baseline": outputs(["--cuda-graph-max-bs", "512"], result([82.0, 82.2, 81.8, 82.1, 81.9])),
        "baseline-bs128": outputs(["--cuda-graph-max-bs", "128"], result(BASELINE_RUNS)),
        "eagle3-bs128": outputs(["--cuda-graph-max-bs", "128", *EAGLE3], result(EAGLE3_RUNS)),
    }
    comparison = compare.compare(stacks)
    first, second = comparison.verdicts
    assert first.line.startswith("baseline-bs128 is 9.1 % faster than baseline (significant")
    assert second.line.startswith("eagle3-bs128 is 34.0 % slower than baseline (significant")
    assert comparison.exit_code == 1


def test_a_different_workload_is_pointed_out() -> None:
    stacks = campaign()
    stacks["eagle3-bs128"]["benchmark"]["output_len"] = 512
    (note,) = compare.compare(stacks).notes
    assert note.startswith("eagle3-bs128 was benchmarked with output_len 512 and baseline with 256")


def test_flags_recorded_as_a_command_line_are_read_with_the_release_flag_table() -> None:
    # Outputs of earlier versions: the launch command only, with abbreviations argparse accepts.
    argv = ["python", "-m", "sglang.launch_server", "--tp", "8", "--model", "/m", "--enable-torch-compile"]
    argv += ["--cuda-graph-bs", "1", "2", "4", "--json-model-override-args={}", "--port", "30000"]
    stacks = campaign()
    for stack in stacks.values():
        del stack["launch_flags"]
    stacks["baseline"]["launch_command"] = " ".join(argv)

    rows = {row.flag: row.values for row in compare.compare(stacks, all_flags=True).flags}

    assert {flag: rows[flag]["baseline"] for flag in rows if rows[flag]["baseline"] is not None} == {
        "--model-path": "/m",
        "--tensor-parallel-size": 8,
        "--port": 30000,
        "--enable-torch-compile": True,
        "--cuda-graph-bs": [1, 2, 4],
        "--json-model-override-args": "{}",
    }
    # Without the release's table: a word that is not an option is the previous option's value.
    assert values_from_argv(argv[3:], "9.9.9")["tp"] == "8"
    assert values_from_argv(argv[3:], "9.9.9")["enable_torch_compile"] is True


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda o: o["eagle3-bs128"].pop("benchmark"),
            r"Stack 'eagle3-bs128' output 'benchmark' is not usable",
        ),
        (lambda o: o["baseline"].update(launch_flags="[secret]"), r"output 'launch_flags' is not usable"),
        (
            lambda o: [o["baseline"].pop(key) for key in ("launch_flags", "launch_command")],
            r"Stack 'baseline' outputs are not usable: none of the outputs launch_argv, launch_flags",
        ),
        (lambda o: o.pop("baseline"), r"compare needs at least two stacks, got 1 \(eagle3-bs128\)"),
    ],
)
def test_bad_input_exits_2_with_a_sentence(change: Any, expected: str) -> None:
    stacks = campaign()
    change(stacks)
    with pytest.raises(SpecError, match=expected):
        compare.compare(stacks)
    out, err = io.StringIO(), io.StringIO()
    assert compare.main_compare(list(stacks), stacks.__getitem__, out=out, err=err) == 2
    assert err.getvalue().startswith("compare: ")
    assert out.getvalue() == ""


def test_a_stack_named_twice_or_a_failing_loader_exits_2() -> None:
    err = io.StringIO()
    assert compare.main_compare(["baseline", "baseline"], campaign().__getitem__, err=err) == 2
    assert "named twice" in err.getvalue()

    def missing(stack: str) -> dict[str, Any]:
        raise SpecError(f"`pulumi stack output` failed: no stack named {stack!r}. Check the stack name.")

    err = io.StringIO()
    assert compare.main_compare(["baseline", "nope"], missing, err=err) == 2
    assert "no stack named 'baseline'" in err.getvalue()


def test_a_post_release_reads_its_release_table() -> None:
    assert values_from_argv(["--tp", "8"], "0.5.8.post1") == {"tp_size": 8}


def test_flags_also_come_from_the_launch_flags_map_or_the_command_string() -> None:
    stacks = campaign()
    # Earlier versions recorded the flags as rendered options, or only as the launch command.
    baseline = stacks["baseline"]
    baseline["launch_flags"] = {"--model-path": "/shared/kimi-k2.5-int4", "--tp-size": "8"}
    baseline["launch_flags"] |= {"--trust-remote-code": True, "--cuda-graph-max-bs": "512"}
    baseline["launch_flags"] |= {"--cuda-graph-bs": ["1", "2", "4"]}
    eagle = stacks["eagle3-bs128"]
    del eagle["launch_flags"]
    rows = {row.flag: row.values for row in compare.compare(stacks).flags}
    assert rows["--cuda-graph-max-bs"] == {"baseline": 512, "eagle3-bs128": 128}
    assert rows["--cuda-graph-bs"] == {"baseline": [1, 2, 4], "eagle3-bs128": None}
    assert "--trust-remote-code" not in rows and "--tensor-parallel-size" not in rows
    assert rows["--host"] == {"baseline": None, "eagle3-bs128": "0.0.0.0"}


def test_no_other_results_module_depends_on_compare_or_plot() -> None:
    # The commands' formatting modules sit on top: history, the gate and the rest never import them.
    results = Path(compare.__file__).parent
    for module in results.rglob("*.py"):
        if module.stem in ("compare", "plot"):
            continue
        imported = set()
        tree = ast.parse(module.read_text())
        # What only a type checker reads (a package face's names, resolved lazily) imports nothing.
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module:
                imported |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        assert not imported & {"sglang_stacks.results.compare", "sglang_stacks.results.plot"}, module.name


def _fleet_outputs(stack: str, runs: Sequence[float]) -> dict[str, Any]:
    """A fleet's outputs as `pulumi stack output --json` prints them, from the shipped stack's spec."""
    from sglang_stacks.config.stackfile import load_stack_spec
    from sglang_stacks.resources.wiring import launch_flags
    from sglang_stacks.results.outputs import FleetOutputs, ReplicaOutputs
    from tests._stacks import STACKS_DIR

    spec = load_stack_spec(stack, STACKS_DIR)
    assert spec.fleet is not None
    flags = launch_flags(spec)
    roles = spec.fleet.disaggregation.role_flags(flags) if spec.fleet.disaggregation else None
    measured = result(runs)
    replicas = [
        ReplicaOutputs(host=i, url=f"http://127.0.0.1:{31000 + i}", launch_command="x", role=host.role)
        for i, host in enumerate(spec.fleet.hosts)
    ]
    written = FleetOutputs(
        tok_s=measured.tok_s_mean,
        router_url="http://127.0.0.1:30100",
        benchmark_levels=[measured],
        replicas=replicas,
        launch_flags=flags,
        role_flags=roles,
        sglang_version=spec.environment.sglang_release,
    )
    dumped: dict[str, Any] = json.loads(written.model_dump_json())
    return dumped


def test_a_disaggregated_fleet_is_compared_with_an_aggregated_one_flag_by_flag_per_role() -> None:
    comparison = compare.compare(
        {
            "demo-fleet": _fleet_outputs("demo-fleet", BASELINE_RUNS),
            "demo-pd": _fleet_outputs("demo-pd", [80.1, 80.6, 80.3, 80.4, 80.2]),
        }
    )
    rows = {row.flag: row.values for row in comparison.flags}
    assert rows["workers"] == {"demo-fleet": "3 aggregated", "demo-pd": "1 prefill + 2 decode"}
    # What both roles share sits beside the aggregated fleet's flag; the rest is per role.
    assert "--tensor-parallel-size" not in rows  # tp 8 everywhere
    assert rows["prefill --disaggregation-mode"] == {"demo-fleet": None, "demo-pd": "prefill"}
    assert rows["decode --disaggregation-mode"] == {"demo-fleet": None, "demo-pd": "decode"}
    assert rows["prefill --chunked-prefill-size"] == {"demo-fleet": None, "demo-pd": 16384}
    assert rows["decode --max-running-requests"] == {"demo-fleet": None, "demo-pd": 256}
    assert rows["--disaggregation-transfer-backend"] == {"demo-fleet": None, "demo-pd": "mooncake"}
    (verdict,) = comparison.verdicts
    assert verdict.significant and verdict.change_pct < -5
    assert comparison.notes == ()  # the same workload


def test_a_fleet_deployed_before_its_release_was_recorded_is_refused_with_the_fix() -> None:
    old = _fleet_outputs("demo-fleet", BASELINE_RUNS)
    del old["sglang_version"]
    with pytest.raises(SpecError) as caught:
        compare.compare({"demo-fleet": old, "baseline": outputs([], result(BASELINE_RUNS))})
    assert "Run `pulumi up -s demo-fleet`" in str(caught.value)
