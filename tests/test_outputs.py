"""The stack outputs, one model per kind of stack, and the values walked into them: a launch flag
from the stack file to the server's argv, and tok/s from the load generator's document to the
stack's output. The program runs in this process against Pulumi's mock engine; each resource's
provider does here what it does at the host's edge (the server's provider renders its command,
the benchmark's turns the document into results), without a host.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime import rpc

from sglang_loadgen import client, contract
from sglang_loadgen.document import SCHEMA, Document
from sglang_loadgen.streaming import RequestRecord
from sglang_stacks.components.deployment import DeploymentArgs, SGLangDeployment
from sglang_stacks.components.server import ServerInputs, ServerOutputs
from sglang_stacks.config import render
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_stacks.hostops import serving
from sglang_stacks.hostops.facts import FoundFacts
from sglang_stacks.resources.benchmark_shape import BenchmarkOutputs
from sglang_stacks.results import compare, measurement
from sglang_stacks.results.outputs import DeploymentOutputs

ROOT = Path(__file__).resolve().parent.parent
# Every repetition at 88.30496 tok/s: rounded once, 88.3. Rounded to 4 decimals, then 3, then 2 (as
# the load generator, the summary and the benchmark's provider each did), it was 88.31.
RUN_TOK_S = 88.30496


def _document(tok_s: float, repetitions: int = 3) -> Document:
    """A document from the load generator's own writer: one 512-token request per repetition."""
    duration_s = 512 / tok_s
    runs = [
        [
            RequestRecord(
                sent_s=0.0, finished_s=duration_s, ttft_s=0.05, completion_tokens=512, prompt_tokens=32
            )
        ]
        for _ in range(repetitions)
    ]
    workload = contract.Workload(input_len=32, output_len=512, repetitions=repetitions)
    level = client.summarize_level(workload, 1, runs, [])
    return Document(schema=SCHEMA, nonce=1, started_unix_s=0.0, workload=workload, levels=[level])


def _revealed(value: Any) -> Any:
    """A property as a provider receives it: a secret's value, not its wrapper."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return _revealed(value["value"])
        return {key: _revealed(item) for key, item in value.items()}
    return [_revealed(item) for item in value] if isinstance(value, list) else value


class _Engine(pulumi.runtime.Mocks):
    """Pulumi's engine in this process: each resource gets the outputs its provider would give."""

    def __init__(self, document: Document, history: Path) -> None:
        self.document = document
        self.history = history
        self.server_inputs: list[ServerInputs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        inputs = {key: _revealed(value) for key, value in args.inputs.items()}
        kind = args.typ.rsplit(":", 1)[-1]
        outputs: dict[str, Any] = {}
        if kind == "PythonEnvironment":
            outputs = {"venv_path": "/v", "python": "/v/bin/python", "sglang_version": inputs["release"]}
        elif kind == "HostProbe":
            outputs = {"facts": FoundFacts(**inputs["declared"], driver_version="580.65.06").model_dump()}
        elif kind == "GpuClaim":
            outputs = {"owner": inputs["stack"], "taken_from": "", "taken_in_update": ""}
        elif kind == "Server":
            # What the server's provider does at launch: its inputs as the engine hands them over
            # (every number a float), and the command it runs.
            launched = ServerInputs.model_validate(inputs)
            self.server_inputs.append(launched)
            outputs = ServerOutputs(
                pid=4242,
                start_ticks=1,
                instance="i1",
                log_path="/v/logs/walk.log",
                launch_command=launched.command(),
                url=f"http://127.0.0.1:{launched.port}",
            ).model_dump()
        elif kind == "Benchmark":
            measured = measurement.Measured(inputs["stack"], "d", "0.5.8", "python -m sglang.launch_server")
            levels = measurement.record(
                measured, self.document, slo=None, host_price_per_hour=None, gate=None, db_path=self.history
            )
            outputs = BenchmarkOutputs(levels=list(levels)).model_dump(mode="json")
        return f"{args.name}-id", {**inputs, **outputs}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


@pytest.fixture(autouse=True)
def _full_tracebacks(monkeypatch: pytest.MonkeyPatch) -> None:
    # A provider method that raised in this process (another test's) left the provider process's
    # setting behind: no traceback frames, which the Pulumi SDK's own stack walk needs.
    monkeypatch.delattr(sys, "tracebacklimit", raising=False)


def deploy(spec: StackSpec, engine: _Engine, stack: str = "walk") -> DeploymentOutputs:
    """The stack's outputs, as ``__main__.py`` exports them, read back into their model."""
    pulumi.runtime.set_mocks(engine, project="sglang-stacks", stack=stack, preview=False)
    exported: dict[str, Any] = {}

    @pulumi.runtime.test  # type: ignore[misc]
    def program() -> pulumi.Output[Any]:
        deployment = SGLangDeployment(stack, DeploymentArgs(stack=stack, spec=spec))
        return pulumi.Output.all(**deployment.outputs.props()).apply(exported.update)

    program()
    return DeploymentOutputs.model_validate(exported)


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """Every argv the renderer makes while the test runs."""
    made: list[list[str]] = []
    renderer: Callable[..., list[str]] = render.render_argv

    def counted(*args: Any, **kwargs: Any) -> list[str]:
        argv = renderer(*args, **kwargs)
        made.append(argv)
        return argv

    monkeypatch.setattr(render, "render_argv", counted)
    yield made


def test_a_flag_walks_from_the_stack_file_to_the_argv_as_one_value_rendered_once(
    tmp_path: Path, renders: list[list[str]]
) -> None:
    spec = load_stack_spec("baseline-bs128", ROOT / "stacks")
    assert spec.server.cuda_graph_max_bs == 128
    engine = _Engine(_document(RUN_TOK_S), tmp_path / "history.sqlite")

    outputs = deploy(spec, engine)

    # The server's provider got the one typed value (the engine made every number a float) and
    # rendered it once, where the server is launched.
    (launched,) = engine.server_inputs
    assert launched.flags.cuda_graph_max_bs == 128 and type(launched.flags.cuda_graph_max_bs) is int
    (argv,) = renders
    assert argv[argv.index("--cuda-graph-max-bs") + 1] == "128"
    assert " --cuda-graph-max-bs 128 " in outputs.launch_command
    # The outputs carry the same value; compare and a preview show it from there, rendering nothing.
    assert outputs.launch_flags == launched.flags
    bs512 = outputs.model_copy(
        update={"launch_flags": outputs.launch_flags.model_copy(update={"cuda_graph_max_bs": 512})}
    )
    dumped = {name: o.model_dump(mode="json") for name, o in (("walk", outputs), ("bs512", bs512))}
    rows = {row.flag: row.values for row in compare.compare(dumped).flags}
    assert rows == {"--cuda-graph-max-bs": {"walk": 128, "bs512": 512}}
    note = serving.ServingNote(stack="walk", pid=4242, release=launched.release, flags=launched.flags)
    assert serving.changes_from(note, bs512.launch_flags, "0.5.8") == ["~ --cuda-graph-max-bs 128 => 512"]
    assert len(renders) == 1, "the flags became an argv once, at the server's launch"


def test_tok_s_walks_from_the_load_generators_document_to_the_stack_output_rounded_once(
    tmp_path: Path,
) -> None:
    document = _document(RUN_TOK_S)
    exact = [repetition.tok_s for repetition in document.levels[0].repetitions]
    engine = _Engine(document, tmp_path / "history.sqlite")

    outputs = deploy(load_stack_spec("baseline-bs128", ROOT / "stacks"), engine)

    assert outputs.tok_s == round(statistics.fmean(exact), 2) == 88.3
    # The stack carries it once: the benchmark's first level is the same number.
    assert outputs.benchmark.tok_s_mean == outputs.levels[0].tok_s_mean == outputs.tok_s
    assert outputs.benchmark_levels == []  # the one level is `benchmark`, not printed twice
    assert outputs.benchmark.tok_s_runs == (88.3, 88.3, 88.3)


def test_outputs_written_in_the_longer_form_of_earlier_versions_read_the_same(tmp_path: Path) -> None:
    """A stack deployed by an earlier version printed a latency's percentiles as a map and kept a
    copy of its only level in ``benchmark_levels``; read back, both forms are the same result."""
    document = _document(RUN_TOK_S)
    outputs = deploy(
        load_stack_spec("baseline-bs128", ROOT / "stacks"), _Engine(document, tmp_path / "h.sqlite")
    )
    written = outputs.model_dump(mode="json")
    assert isinstance(written["benchmark"]["ttft_ms"], str) and isinstance(
        written["benchmark"]["tok_s_runs"], str
    )
    earlier = {
        **written,
        "benchmark": outputs.benchmark.model_dump(mode="json", exclude_none=True),
        "benchmark_levels": [outputs.benchmark.model_dump(mode="json", exclude_none=True)],
    }

    assert DeploymentOutputs.model_validate(written) == outputs
    assert DeploymentOutputs.model_validate(earlier).benchmark == outputs.benchmark
    assert DeploymentOutputs.model_validate(earlier).levels == outputs.levels == [outputs.benchmark]
