"""Building a release's parser with stand-ins: what passes, and every way a release is refused."""

import textwrap
from pathlib import Path

import pytest

from sglang_flags.build import build_from_folder


def _release(tmp_path: Path, server_args: str, **modules: str) -> Path:
    """A release folder laid out like an unpacked wheel, with ``server_args.py`` and other modules."""
    srt = tmp_path / "release" / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt.parent / "__init__.py").write_text("")
    (srt / "__init__.py").write_text("")
    (srt / "server_args.py").write_text(textwrap.dedent(server_args))
    for name, text in modules.items():
        (srt / f"{name}.py").write_text(textwrap.dedent(text))
    return tmp_path / "release"


def _build(tmp_path: Path, server_args: str, **modules: str):
    return build_from_folder("9.9.9", _release(tmp_path, server_args, **modules), helpers=[])


def _by_dest(built) -> dict[str, dict[str, object]]:
    return {f["dest"]: f for f in built.flags}


HEAVY_IMPORTS = """\
    import importlib.util
    import os
    import torch
    import triton
    from transformers import PretrainedConfig

    class Layer(torch.nn.Module):
        pass

    class Config(PretrainedConfig):
        extra = Config_rebuild = None

    @triton.jit
    def kernel(x):
        return x

    @torch.compile(dynamic=True)
    def compiled(x):
        return x

    ON_GPU = torch.cuda.is_available()
    ON_NPU = hasattr(torch, "npu")
    HAS_FLASHINFER = importlib.util.find_spec("flashinfer") is not None
    BACKENDS = ["triton", "flashinfer"] + (["npu"] if ON_NPU else [])
"""


def test_a_release_importing_heavy_packages_builds_from_its_own_code(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_DEFAULT_BACKEND", "set-by-whoever-runs-the-build")
    built = _build(
        tmp_path,
        HEAVY_IMPORTS
        + """\
    class ServerArgs:
        @staticmethod
        def add_cli_args(parser):
            parser.add_argument("--model-path", "--model", type=str, required=True)
            parser.add_argument("--attention-backend", choices=BACKENDS, default=kernel("triton"))
            parser.add_argument("--flashinfer-found", default=HAS_FLASHINFER)
            parser.add_argument("--env-default", default=os.environ.get("SGLANG_DEFAULT_BACKEND", "unset"))
            parser.add_argument("--sampling-backend", choices={"pytorch", "flashinfer", "ascend"})
            parser.add_argument("--cuda-graph-bs", type=int, nargs="+")
    """,
    )
    assert built.refused == []
    flags = _by_dest(built)
    assert flags["model_path"]["flags"] == ["--model-path", "--model"]
    assert flags["attention_backend"]["choices"] == ["triton", "flashinfer"]  # no plugin: no npu
    assert flags["attention_backend"]["default"] == "triton"  # a stand-in decorator keeps the function
    assert flags["flashinfer_found"]["default"] is False  # probing a missing package finds nothing
    assert flags["env_default"]["default"] == "unset"  # the caller's SGLANG_* variables do not leak in
    assert flags["sampling_backend"]["choices"] == ["ascend", "flashinfer", "pytorch"]  # a set, sorted
    assert flags["cuda_graph_bs"]["nargs"] == "+"
    assert {"torch", "triton", "transformers"} <= set(built.stand_in_modules)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (
            'parser.add_argument("--dtype", default=torch.float16)',
            "--dtype default is <stand-in torch.float16>",
        ),
        ('parser.add_argument("--kind", choices=["a", torch.bfloat16])', "--kind choices element is"),
        ('parser.add_argument("--v", default=str(torch.__version__))', "--v default is"),
        ('parser.add_argument("--d", type=torch.dtype)', "--d type is <stand-in torch.dtype>"),
    ],
)
def test_a_value_from_a_stand_in_refuses_the_release(tmp_path, code, reason):
    built = _build(
        tmp_path,
        f"""\
    import torch

    class ServerArgs:
        @staticmethod
        def add_cli_args(parser):
            {code}
    """,
    )
    assert built.flags is None
    assert any(reason in r for r in built.refused), built.refused


def test_a_question_put_to_a_stand_in_while_building_refuses_the_release(tmp_path):
    built = _build(
        tmp_path,
        """\
    from transformers import CONFIG_MAPPING

    class ServerArgs:
        @staticmethod
        def add_cli_args(parser):
            parser.add_argument("--model-type", choices=list(CONFIG_MAPPING))
    """,
    )
    assert built.flags is None
    assert (
        "add_cli_args asked the iteration of <stand-in transformers.CONFIG_MAPPING> "
        "at sglang/srt/server_args.py:6"
    ) in built.refused


def test_a_parser_built_by_a_stand_in_refuses_the_release(tmp_path):
    built = _build(tmp_path, "import msgspec\nServerArgs = msgspec.defstruct('ServerArgs', [])\n")
    assert built.flags is None
    assert "it is built by a stand-in package" in built.refused[0]


def test_an_import_error_inside_the_release_refuses_it_naming_the_line(tmp_path):
    built = _build(tmp_path, "from sglang.srt.helpers import CHOICES\n", helpers="x = 1\nCHOICES = 1 / 0\n")
    assert built.flags is None
    assert built.refused == [
        "importing it raised ZeroDivisionError: division by zero (at sglang/srt/helpers.py:2)"
    ]
    assert str(tmp_path) not in built.refused[0]


def test_a_module_missing_from_the_release_itself_is_not_stood_in_for(tmp_path):
    built = _build(tmp_path, "from sglang.srt.not_in_this_release import X\n")
    assert built.refused == [
        "importing it raised ModuleNotFoundError: No module named 'sglang.srt.not_in_this_release' "
        "(at sglang/srt/server_args.py:1)"
    ]
