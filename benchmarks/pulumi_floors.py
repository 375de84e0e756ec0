"""The floors the control-plane benchmark sets our commands against, on the same Pulumi CLI and
backend: an empty program (one export), a program with one trivial dynamic resource, and with Go
on PATH two programs on a provider plugin compiled from ``compiled_floor/`` that does nothing (one
resource; our spec's Python work and a deployment's five resources)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests._pulumi import Workspace, emulator_stack, free_port

__all__ = [
    "COMPILED",
    "DYNAMIC_PROGRAM",
    "FLOOR_NAMES",
    "PROGRAMS",
    "build_compiled_floor",
    "floor_workspace",
    "use_plugins",
]

EMPTY_PROGRAM = 'import pulumi\n\npulumi.export("answer", 42)\n'
DYNAMIC_PROGRAM = """import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider


class Noop(ResourceProvider):
    def create(self, props):
        return CreateResult("noop", props)


class Thing(Resource):
    def __init__(self, name):
        super().__init__(Noop(), name, {"value": 1})


pulumi.export("answer", Thing("thing").id)
"""
COMPILED_PROGRAM = """import pulumi


class Thing(pulumi.CustomResource):
    def __init__(self, name):
        super().__init__("floor:index:Thing", name, {"value": 1})


pulumi.export("answer", Thing("thing").id)
"""
SPEC_COMPILED_PROGRAM = """import pulumi

from sglang_stacks.config import preflight, render
from sglang_stacks.config.flags import launch_values
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import SECTION_KEYS, load_spec

config = pulumi.Config()
sections = {key: config.get_object(key) for key in SECTION_KEYS if config.get(key) is not None}
spec = load_spec(sections, pulumi.get_stack())
release = spec.environment.sglang_release
preflight.raise_on_errors(preflight.run_preflight(spec, release))
flags = launch_values(render.canonical_flags(spec.launch_flags(), release))
memory = plan_memory(spec, release).as_dict()
deployment = pulumi.ComponentResource("floor:index:Deployment", "deployment")
inputs = {"probe": {"gpus": spec.host.gpu_count}, "claim": {"stack": pulumi.get_stack()},
          "environment": {"release": release}, "server": {"flags": flags},
          "benchmark": {"workload": spec.benchmark.settings()}}
for name, props in inputs.items():
    part = pulumi.CustomResource("floor:index:Thing", name, props, pulumi.ResourceOptions(parent=deployment))
    pulumi.export(name, part.id)
pulumi.export("memory_plan", memory)
"""
PROGRAMS = {"empty": EMPTY_PROGRAM, "dynamic": DYNAMIC_PROGRAM}
COMPILED = {"compiled": COMPILED_PROGRAM, "spec-compiled": SPEC_COMPILED_PROGRAM}
FLOOR_NAMES = {
    "empty": "empty program",
    "dynamic": "one dynamic resource",
    "compiled": "one compiled resource",
    "spec-compiled": "our spec's work, five compiled resources",
}


def build_compiled_floor(folder: Path) -> Path | None:
    """The do-nothing provider plugin built into ``folder``; None (and why) without Go."""
    if shutil.which("go") is None:
        print("Go is not on PATH: the compiled floors are left out.", file=sys.stderr)
        return None
    source = Path(__file__).resolve().parent / "compiled_floor"
    binary = folder / "pulumi-resource-floor"
    subprocess.run(["go", "build", "-trimpath", "-o", str(binary), "."], cwd=source, check=True)
    return folder


def use_plugins(workspace: Workspace, plugins: Path) -> None:
    """Points the workspace's project file (a copy of the project's) at the compiled floor's plugin."""
    project_file = workspace.path / "Pulumi.yaml"
    text = project_file.read_text()
    project_file.unlink()
    project_file.write_text(f"{text}plugins:\n  providers:\n    - name: floor\n      path: {plugins}\n")


def floor_workspace(root: Path, name: str, program: str, plugins: Path | None) -> Workspace:
    """A workspace with ``program`` deployed as stack ``name``; with ``plugins``, the project file
    points the engine at the compiled floor's plugin there."""
    floor = Workspace.create(root / name)
    floor.use_program(program)
    if plugins is not None:
        use_plugins(floor, plugins)
    config = emulator_stack(port=free_port(), state_dir=root / name) if name == "spec-compiled" else ""
    floor.init_stack(name, config)
    floor.run("up", "--yes", "--skip-preview", "-s", name)
    return floor
