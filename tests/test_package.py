"""sglang-stacks is a package: another Pulumi program builds its components from its own code.

The project is installed into a fresh virtualenv (not the project's), and a program in a folder
outside the repository deploys an emulator host with `SGLangDeployment`; the real Pulumi CLI
previews it. The installed package claims no generic top-level name such as ``components``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests._pulumi import ROOT, Workspace

PROGRAM = '''
"""A user's own program: one deployment of the emulator host, built from Python."""
import pulumi

from sglang_stacks.components.deployment import DeploymentArgs, SGLangDeployment
from sglang_stacks.config.spec import load_spec

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
pulumi.export("launch_flags", deployment.launch_flags)
pulumi.export("memory_plan", deployment.memory_plan)
'''


@pytest.mark.integration
def test_a_program_outside_the_repository_previews_a_deployment_from_the_installed_package(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    installed = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
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
