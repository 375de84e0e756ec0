"""State written by one version of the tool keeps working with the next.

Dynamic providers are pickled into the state by reference to their modules, so their import
paths are a public interface: a stack deployed by an earlier version is previewed, refreshed,
updated and destroyed by today's code. The earlier version is a real commit of this repository,
checked out into a temporary folder and run with the real Pulumi CLI.
"""

from __future__ import annotations

import importlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path

import pulumi.dynamic as dynamic
import pytest

from sglang_stacks.components._pickled import provider_paths
from tests._pulumi import ROOT, Workspace, emulator_stack, free_port

# The last commit before the `sglang_stacks` package: its providers live in `components.*`.
BEFORE_THE_PACKAGE = "4aa527fea7579151c1c8f40c60462e32c5920257"

# Every provider path a state of any release may name: what `provider_paths` derived from each
# release's code. Moving or renaming a provider breaks `refresh` and `destroy` of every stack
# deployed with it unless its old name stays bound (see components/_pickled.py): add, never remove.
PICKLED_PROVIDERS = (
    "components.benchmark:_BenchmarkProvider",
    "components.draft_model:_DraftModelProvider",
    "components.environment:_PythonEnvironmentProvider",
    "components.host:_ClaimProvider",
    "components.host:_ProbeProvider",
    "components.server:_ServerProvider",
    "sglang_stacks.components.benchmark:BenchmarkProvider",
    "sglang_stacks.components.canary:CanaryProvider",
    "sglang_stacks.components.draft_model:DraftModelProvider",
    "sglang_stacks.components.environment:PythonEnvironmentProvider",
    "sglang_stacks.components.host:ClaimProvider",
    "sglang_stacks.components.host:ProbeProvider",
    "sglang_stacks.components.multinode:InitAddressProvider",
    "sglang_stacks.components.router:RouterProvider",
    "sglang_stacks.components.router:RouterWorkerProvider",
    "sglang_stacks.components.server:ServerProvider",
    "sglang_stacks.kube.benchmark:KubeBenchmarkProvider",
    "sglang_stacks.kube.claim:KubeClaimProvider",
    "sglang_stacks.kube.router:KubeRouterProvider",
    "sglang_stacks.kube.server:KubeServerProvider",
)


def guard(found: Iterable[str]) -> list[str]:
    """What is wrong with the provider paths the code offers (``found``), as sentences."""
    offered, recorded = set(found), set(PICKLED_PROVIDERS)
    gone = [
        f"{path}: a state may name it and the code no longer binds it; keep the old name bound "
        "(`OldName = NewName` in its module, or a module kept for it)"
        for path in PICKLED_PROVIDERS
        if path not in offered
    ]
    new = [
        f"{path}: a new provider path; record it in PICKLED_PROVIDERS" for path in sorted(offered - recorded)
    ]
    return gone + new


@pytest.mark.parametrize("path", PICKLED_PROVIDERS)
def test_every_provider_path_a_state_may_name_still_imports_a_provider(path: str) -> None:
    module, name = path.split(":")
    provider = getattr(importlib.import_module(module), name)
    assert isinstance(provider, type) and issubclass(provider, dynamic.ResourceProvider)


def test_the_provider_paths_the_code_offers_are_every_recorded_one_and_no_other() -> None:
    found = provider_paths()

    assert guard(found) == []
    # Every provider class is reachable under its own name where it is defined.
    assert {f"{cls.__module__}:{cls.__name__}" for cls in found.values()} <= set(found)


_DERIVE = """
import json, os, pickle, sglang_stacks
from sglang_stacks.components._pickled import provider_paths

assert sglang_stacks.__file__.startswith(os.getcwd()), sglang_stacks.__file__
# What Pulumi's dill wrote for the benchmark's provider: its class by reference.
pickled = b"\\x80\\x04csglang_stacks.components.benchmark\\nBenchmarkProvider\\n)\\x81."
try:
    loaded = type(pickle.loads(pickled)).__name__
except AttributeError as error:
    loaded = f"AttributeError: {error}"
found = provider_paths()  # the whole package, as the guard above walks it
print(json.dumps({"paths": sorted(found), "loaded": loaded}))
"""


def _derive_in(copy: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _DERIVE], cwd=copy, capture_output=True, text=True, check=True
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_renaming_a_provider_without_keeping_its_old_name_fails_the_guard(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    for package in ("sglang_stacks", "components"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    for source in copy.rglob("*.py"):  # the class and every use of its name, as an editor renames
        source.write_text(re.sub(r"\bBenchmarkProvider\b", "BenchmarkRunner", source.read_text()))

    renamed = _derive_in(copy)

    # A stack deployed before the rename cannot load its benchmark's provider any more ...
    assert str(renamed["loaded"]).startswith("AttributeError"), renamed["loaded"]
    # ... and the guard names the path it lost (and the new one to record).
    problems = guard(renamed["paths"])  # type: ignore[arg-type]
    assert any(
        p.startswith("sglang_stacks.components.benchmark:BenchmarkProvider: a state may") for p in problems
    )
    assert any(p.startswith("sglang_stacks.components.benchmark:BenchmarkRunner: a new") for p in problems)

    benchmark = copy / "sglang_stacks" / "components" / "benchmark.py"
    benchmark.write_text(benchmark.read_text() + "\n\nBenchmarkProvider = BenchmarkRunner\n")
    kept = _derive_in(copy)

    assert kept["loaded"] == "BenchmarkRunner"
    assert guard(kept["paths"]) == [  # type: ignore[arg-type]
        "sglang_stacks.components.benchmark:BenchmarkRunner: a new provider path; record it in "
        "PICKLED_PROVIDERS"
    ]


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
    # The earlier version installs its own emulator into the host's environment folder, in place:
    # a home of its own keeps that folder away from the other tests' servers and probes, which
    # would otherwise run the earlier emulator's code, or half of it while it is being swapped.
    home = {"HOME": str(tmp_path / "home"), "PIP_CACHE_DIR": str(Path.home() / ".cache" / "pip")}
    old = Workspace(checkout(BEFORE_THE_PACKAGE, tmp_path / "old"), tmp_path / "state", dict(home))
    old.backend.mkdir()
    new = Workspace.create(tmp_path / "new-root")
    new.backend, new.extra_env = old.backend, dict(home)
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
