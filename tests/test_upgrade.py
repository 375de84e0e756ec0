"""State written by one version of the tool keeps working with the next.

Dynamic providers are pickled into the state by reference to their modules, so their import
paths are a public interface: a stack deployed by an earlier version is previewed, refreshed,
updated and destroyed by today's code. The earlier version is a real commit of this repository,
checked out into a temporary folder and run with the real Pulumi CLI.
"""

from __future__ import annotations

import importlib
import io
import subprocess
import tarfile
from pathlib import Path

import pulumi.dynamic as dynamic
import pytest

from tests._pulumi import ROOT, Workspace, emulator_stack, free_port

# The last commit before the `sglang_stacks` package: its providers live in `components.*`.
BEFORE_THE_PACKAGE = "4aa527fea7579151c1c8f40c60462e32c5920257"

# Every provider class a state may name, by the import path it was pickled under. Moving or
# renaming one breaks `refresh` and `destroy` of every stack deployed with it: add, never remove.
PICKLED_PROVIDERS = (
    "components.server:_ServerProvider",
    "components.benchmark:_BenchmarkProvider",
    "components.environment:_PythonEnvironmentProvider",
    "components.draft_model:_DraftModelProvider",
    "components.host:_ProbeProvider",
    "components.host:_ClaimProvider",
    "sglang_stacks.components.server:ServerProvider",
    "sglang_stacks.components.multinode:InitAddressProvider",
)


@pytest.mark.parametrize("path", PICKLED_PROVIDERS)
def test_every_provider_path_a_state_may_name_still_imports_a_provider(path: str) -> None:
    module, name = path.split(":")
    provider = getattr(importlib.import_module(module), name)
    assert isinstance(provider, type) and issubclass(provider, dynamic.ResourceProvider)


def checkout(commit: str, into: Path) -> Path:
    """The repository's files at ``commit``, unpacked into ``into``."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
            capture_output=True,
            check=True,
        ).stdout
    except subprocess.CalledProcessError as failed:
        raise AssertionError(
            f"Commit {commit} is not in this clone ({failed.stderr.decode().strip()}); the upgrade "
            "test needs the project's history: clone without --depth."
        ) from None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / ".venv").symlink_to(ROOT / ".venv")
    return into


@pytest.mark.integration
def test_a_stack_deployed_by_the_version_before_the_package_is_kept_by_this_one(tmp_path: Path) -> None:
    old = Workspace(checkout(BEFORE_THE_PACKAGE, tmp_path / "old"), tmp_path / "state")
    old.backend.mkdir()
    new = Workspace.create(tmp_path / "new-root")
    new.backend = old.backend
    config = emulator_stack(port=free_port(), state_dir=tmp_path)
    old.init_stack("kept", config)
    old.run("up", "--yes", "--skip-preview", "-s", "kept")
    deployed = old.outputs("kept")
    (new.path / "stacks" / "Pulumi.kept.yaml").write_text(
        (old.path / "stacks" / "Pulumi.kept.yaml").read_text()
    )

    preview = new.json("preview", "--json", "-s", "kept")

    replaced = {
        step["urn"].rsplit("::", 1)[1]: {
            reason: (step["oldState"]["inputs"].get(reason), step["newState"]["inputs"].get(reason))
            for reason in step.get("replaceReasons") or ()
        }
        for step in preview["steps"]
        if step["op"] in ("replace", "create-replacement")
    }
    assert replaced == {}, "today's code would replace what the earlier version deployed"
    assert preview["changeSummary"].get("create", 0) == 0
    new.run("refresh", "--yes", "-s", "kept")
    new.run("up", "--yes", "--skip-preview", "-s", "kept")
    assert new.outputs("kept")["tok_s"] == deployed["tok_s"], "nothing changed, so nothing was re-measured"
    server_pid = (tmp_path / "host" / "serving.json").read_text()
    new.run("destroy", "--yes", "-s", "kept")
    assert new.outputs("kept") == {}
    assert not (tmp_path / "host" / "claim.json").exists()
    assert not (tmp_path / "host" / "serving.json").exists(), f"the server {server_pid} still serves"
