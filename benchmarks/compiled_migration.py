"""Whether a stack's dynamic resources can move to a compiled provider without being replaced:
the state migration a rewrite of the providers as a compiled plugin would need.

Deploys one Python dynamic resource, then runs the same program with the resource declared as a
resource of the compiled floor's provider (``compiled_floor/``, built here) under an alias of its old
type, and prints what the preview plans, what the update did and the state's types and ids after
it. Needs Go on PATH.

Run: ``. .venv/sglang-stacks.env && python benchmarks/compiled_migration.py``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_floors import DYNAMIC_PROGRAM, build_compiled_floor, use_plugins

from tests._pulumi import Workspace

COMPILED = """import pulumi

moved = pulumi.ResourceOptions(aliases=[pulumi.Alias(type_="pulumi-python:dynamic:Resource")])
pulumi.export("answer", pulumi.CustomResource("floor:index:Thing", "thing", {"value": 1}, moved).id)
"""


def resources(workspace: Workspace) -> list[str]:
    state = workspace.json("stack", "export", "-s", "moving")["deployment"]["resources"]
    return [f"{res['type']} (id {res.get('id')})" for res in state if res.get("custom")]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plugins = build_compiled_floor(root / "plugins")
        if plugins is None:
            sys.exit(1)
        workspace = Workspace.create(root)
        use_plugins(workspace, plugins)
        workspace.use_program(DYNAMIC_PROGRAM)
        workspace.init_stack("moving")
        workspace.run("up", "--yes", "--skip-preview", "-s", "moving")
        print("before:", "; ".join(resources(workspace)))
        (workspace.path / "__main__.py").write_text(COMPILED)
        plan = workspace.run("preview", "--diff", "-s", "moving").stdout
        print("preview:", " ".join(line.strip() for line in plan.splitlines() if "floor:index:Thing" in line))
        done = workspace.run("up", "--yes", "--skip-preview", "-s", "moving").stdout
        summary = done[done.index("Resources:") :].split("Duration")[0]
        print("update:", " ".join(summary.split()))
        print("after:", "; ".join(resources(workspace)))
        again = workspace.run("preview", "-s", "moving").stdout
        print("next preview:", " ".join(line.strip() for line in again.splitlines()[-3:]))


if __name__ == "__main__":
    main()
