"""One workspace per drill module: the drills share its state backend, history and host folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._pulumi import Workspace
from tests.faults.drill import Drill


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drill]:
    root = tmp_path_factory.mktemp("drill")
    workspace = Workspace.create(root)
    workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(root / "history.sqlite")
    found = Drill(workspace, root)
    yield found
    # Whatever a drill left serving goes with the module.
    for stack in workspace.path.joinpath("stacks").glob("Pulumi.*.yaml"):
        name = stack.name.removeprefix("Pulumi.").removesuffix(".yaml")
        workspace.run("cancel", "--yes", "-s", name, check=False)
        workspace.run("destroy", "--yes", "--skip-preview", "-s", name, check=False)
