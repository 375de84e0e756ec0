"""sglang-stacks is a package: another Pulumi program builds its components from its own code.

The project is installed into a fresh virtualenv (not the project's), and a program in a folder
outside the repository deploys an emulator host with `SGLangDeployment`; the real Pulumi CLI
previews it. The installed package claims no generic top-level name such as ``components``.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests._pulumi import ROOT, Workspace

PROGRAM = '''
"""A user's own program: one deployment of the emulator host, built from Python."""
import pulumi

from sglang_stacks.components import DeploymentArgs, Fleet, FleetArgs, SGLangDeployment, SGLangServer
from sglang_stacks.config import load_spec

pulumi.log.info(f"the package offers {Fleet.__name__}({FleetArgs.__name__}) and {SGLangServer.__name__}")

spec = load_spec(
    {
        "host": {"kind": "emulator", "state_dir": "STATE/host"},
        "environment": {"sglang_release": "0.5.8"},
        "model": {"path": "/shared/kimi-k2.5-int4", "weights_per_gpu_gb": 72.33},
        "server": {"tp_size": 8, "cuda_graph_max_bs": 128, "disable_custom_all_reduce": True},
    },
    "mine",
)
deployment = SGLangDeployment("mine", DeploymentArgs(stack="mine", spec=spec))
deployment.outputs.export()
'''


@pytest.mark.integration
def test_a_program_outside_the_repository_previews_a_deployment_from_the_installed_package(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # From the wheels the bootstrap keeps, when there are some: the same pins, without the index. Not
    # compiled: the preview's few processes compile less than the whole install would.
    wheels = os.environ.get("SGLANG_STACKS_WHEELS")
    offline = ["--no-index", "--find-links", wheels, "--no-compile"] if wheels else []
    installed = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *offline,
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    top_level = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.util as u; print(u.find_spec('components'))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert top_level.stdout.strip() == "None", "the package must not install a top-level `components`"

    project = tmp_path / "mine"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        textwrap.dedent(
            f"""\
            name: mine
            runtime:
              name: python
              options:
                virtualenv: {venv}
            """
        )
    )
    (project / "__main__.py").write_text(PROGRAM.replace("STATE", str(tmp_path)))
    backend = tmp_path / "state"
    backend.mkdir()
    workspace = Workspace(project, backend)
    workspace.run("stack", "init", "mine")

    preview = workspace.json("preview", "--json", "-s", "mine")

    created = {step["urn"].rsplit("::", 1)[1] for step in preview["steps"] if step["op"] == "create"}
    assert {
        "mine",
        "mine-environment",
        "mine-probe",
        "mine-claim",
        "mine-server",
        "mine-benchmark",
    } <= created
    assert preview["changeSummary"]["create"] >= 7
    said = [d.get("message", "") for d in preview.get("diagnostics", [])]
    assert any("the package offers Fleet(FleetArgs) and SGLangServer" in m for m in said), said


PUBLIC_PACKAGES = (
    "sglang_stacks",
    "sglang_stacks.campaign",
    "sglang_stacks.components",
    "sglang_stacks.config",
    "sglang_stacks.drive",
    "sglang_stacks.hostops",
    "sglang_stacks.results",
)


def _isort_order(name: str) -> tuple[int, str]:
    """How `__all__` is sorted (ruff's RUF022): CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_each_public_package_names_what_it_offers_in_a_sorted_all(package: str) -> None:
    face = importlib.import_module(package)
    offered = face.__all__

    assert offered == sorted(offered, key=_isort_order)
    assert offered, f"{package} offers nothing"
    submodules = {found.name for found in pkgutil.iter_modules(face.__path__)}
    # A name that is also a submodule's would be shadowed by the module once it is imported.
    assert not set(offered) & submodules
    for name in offered:
        value = getattr(face, name)
        assert value is not None and name in dir(face)
        home = getattr(value, "__module__", None)
        assert home is None or home.startswith(package), f"{package}.{name} is {home}'s"


def _type_checking_names(face: Path) -> dict[str, int]:
    """How often each name is written in a face: once per import under ``TYPE_CHECKING``, once per
    string that spells it anywhere else (a hand-kept ``__all__`` or map of homes)."""
    tree = ast.parse(face.read_text())
    counts: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                for alias in statement.names:
                    counts[alias.asname or alias.name] = counts.get(alias.asname or alias.name, 0) + 1
    for found in ast.walk(tree):
        if isinstance(found, ast.Constant) and isinstance(found.value, str) and found.value in counts:
            counts[found.value] += 1
    return counts


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_each_face_writes_each_name_once_and_offers_exactly_those(package: str) -> None:
    face = importlib.import_module(package)
    written = _type_checking_names(Path(str(face.__file__)))

    assert {name: count for name, count in written.items() if count > 1} == {}
    assert sorted(face.__all__) == sorted(written)


def test_importing_the_public_packages_imports_none_of_their_modules() -> None:
    check = (
        f"import sys, {', '.join(PUBLIC_PACKAGES)}\n"
        "print(sorted(m for m in sys.modules if m.startswith('sglang_stacks')))"
    )
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, check=True)

    assert done.stdout.strip() == str(sorted({*PUBLIC_PACKAGES, "sglang_stacks._face"}))


_PROVIDER_START = """
import importlib, json, sys
from sglang_stacks.shape import Shape
from tests.test_upgrade import PICKLED_PROVIDERS

for path in PICKLED_PROVIDERS:
    if path.startswith("sglang_stacks."):
        importlib.import_module(path.split(":")[0])


def shapes(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from shapes(sub)


built = [s.__qualname__ for s in shapes(Shape) if s.__pydantic_complete__]
generic = [s.__qualname__ for s in shapes(Shape) if s.__pydantic_generic_metadata__["parameters"]]
planner = ("sglang_stacks.config.memory", "sglang_stacks.config.execution", "sglang_world.execute")
loaded = [m for m in planner if m in sys.modules]
print(json.dumps({"built": sorted(set(built) - set(generic)), "planner": loaded}))
"""


def test_a_provider_process_starts_without_the_planner_and_builds_no_validator_it_has_not_used() -> None:
    # What each `preview`, `up` and `destroy` pays in every provider process it starts: the modules
    # its providers are pickled from, and nothing more (docs/performance.md, "Shapes built when
    # first used"). A validator is built when a shape is first validated, not at import.
    done = subprocess.run(
        [sys.executable, "-c", _PROVIDER_START], cwd=ROOT, capture_output=True, text=True, check=True
    )
    started = json.loads(done.stdout)

    assert started["planner"] == [], "the stack outputs' models pull the memory planner in"
    assert started["built"] == [], "shapes validated at import, before the provider needs them"


def test_the_public_imports_the_readme_shows_work() -> None:
    built = (ROOT / "README.md").read_text().split("## How it is built", 1)[1].split("\n## ", 1)[0]
    shown = built.split("```python\n", 1)[1].split("```", 1)[0]

    exec(compile(shown, "README.md", "exec"), {})  # raises ImportError if a name moved
    assert shown.count("import") >= 5


def test_every_error_of_the_hierarchy_is_offered_by_the_package() -> None:
    # A program catching the tool's failures imports them from the package, never from a module.
    import sglang_stacks
    from sglang_stacks import errors

    hierarchy = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.StacksError)
    }

    assert hierarchy - set(sglang_stacks.__all__) == set()
