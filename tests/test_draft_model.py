"""DraftModel: real folders uploaded and hashed through the local transport, the digest checked
against coreutils, and the resource driven through the real Pulumi engine.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from sglang_stacks.components.draft_model import (
    DraftModel,
    DraftModelInputs,
    DraftModelOutputs,
    DraftModelProvider,
    draft_model_args,
    local_tree_digest,
)
from sglang_stacks.errors import ArtifactError, SpecError
from sglang_stacks.hostops.artifacts import put
from sglang_stacks.hostops.connection import Connection
from tests._pulumi import Workspace
from tests.faults.drill import kill_tree
from tests.sshd import start_sshd

Props = dict[str, Any]
LOCAL = {"kind": "local"}


def make_draft(folder: Path, weights: bytes = b"\x00weights\x01" * 1000) -> Path:
    """A small stand-in for an EAGLE-3 draft checkpoint folder."""
    (folder / "shards").mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}\n')
    (folder / "shards" / "model.safetensors").write_bytes(weights)
    return folder


def props_for(path_on_host: Path, local: Path | None = None, **changes: Any) -> Props:
    """The inputs DraftModel gives its provider."""
    local_digest = local_tree_digest(local).digest if local else None
    props: Props = {
        "connection": LOCAL,
        "source": "local" if local else "host",
        "local_path": str(local) if local else None,
        "local_digest": local_digest,
        "path_on_host": str(path_on_host),
        "sha256": None,
        "sha256_manifest": None,
        "timeout_s": 60,
        "digest": local_digest,
        "files": None,
        "size_bytes": None,
    }
    props.update(changes)
    return props


def coreutils_digest(folder: Path) -> str:
    """The tree digest as the documented shell pipeline computes it."""
    done = subprocess.run(
        "find -L . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum",
        shell=True,
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()[0]


def test_upload_puts_the_folder_on_the_host_with_the_digest_coreutils_computes(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    host = tmp_path / "host" / "eagle3"
    outs = DraftModelProvider().create(props_for(host, local)).outs or {}
    assert (host / "shards" / "model.safetensors").read_bytes() == (
        local / "shards" / "model.safetensors"
    ).read_bytes()
    assert outs["digest"] == coreutils_digest(local) == coreutils_digest(host)
    assert outs["files"] == 2
    assert outs["size_bytes"] == sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
    assert outs["path_on_host"] == str(host)
    assert not [p.name for p in host.parent.iterdir() if p.name != "eagle3"]


def test_a_folder_already_right_on_the_host_is_not_uploaded_again(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    host = tmp_path / "host" / "eagle3"
    provider = DraftModelProvider()
    outs = provider.create(props_for(host, local)).outs or {}
    inode = (host / "config.json").stat().st_ino
    again = provider.update(str(host), outs, props_for(host, local)).outs
    assert again == outs
    assert (host / "config.json").stat().st_ino == inode


def test_new_local_content_updates_in_place_and_replaces_stale_files(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    host = tmp_path / "host" / "eagle3"
    provider = DraftModelProvider()
    outs = provider.create(props_for(host, local)).outs or {}

    (local / "shards" / "model.safetensors").write_bytes(b"retrained" * 500)
    (local / "shards" / "model.safetensors").rename(local / "shards" / "model-v2.safetensors")
    news = props_for(host, local)
    diff = provider.diff(str(host), outs, news)
    assert diff.changes and diff.replaces == []

    updated = provider.update(str(host), outs, news).outs or {}
    assert updated["digest"] == news["local_digest"] != outs["digest"]
    assert sorted(p.name for p in (host / "shards").iterdir()) == ["model-v2.safetensors"]


def test_symbolic_links_in_the_local_folder_arrive_as_files(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    elsewhere = tmp_path / "tokenizer.json"
    elsewhere.write_text("{}")
    (local / "tokenizer.json").symlink_to(elsewhere)
    host = tmp_path / "host" / "eagle3"
    outs = DraftModelProvider().create(props_for(host, local)).outs or {}
    assert not (host / "tokenizer.json").is_symlink()
    assert outs["files"] == 3 and outs["digest"] == local_tree_digest(local).digest


def test_host_source_is_measured_where_it_is(tmp_path: Path) -> None:
    host = make_draft(tmp_path / "on-host")
    outs = DraftModelProvider().create(props_for(host)).outs or {}
    assert outs["digest"] == coreutils_digest(host)
    assert outs["files"] == 2


def test_missing_and_empty_folders_on_the_host_are_artifact_errors(tmp_path: Path) -> None:
    with pytest.raises(
        ArtifactError, match=r"There is no draft model at .*/nowhere on the local host\. Copy"
    ):
        DraftModelProvider().create(props_for(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match=r"folder .*/empty on the local host is empty\. Copy"):
        DraftModelProvider().create(props_for(tmp_path / "empty"))


def test_wrong_expected_digest_names_both_digests_and_the_fix(tmp_path: Path) -> None:
    host = make_draft(tmp_path / "on-host")
    expected = "0" * 64
    with pytest.raises(ArtifactError) as caught:
        DraftModelProvider().create(props_for(host, sha256=expected))
    assert caught.value.message == (
        f"The draft model at {host} on the local host has digest {coreutils_digest(host)}, expected "
        f"{expected}. Re-upload the draft model, or fix draftModel.sha256 if the new content is intended."
    )


def test_a_local_folder_with_another_digest_is_refused_before_anything_is_uploaded(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    host = tmp_path / "host" / "eagle3"
    manifest = {"config.json": "1" * 64}
    for expected in ({"sha256": "0" * 64}, {"sha256_manifest": manifest}):
        with pytest.raises(ArtifactError, match=r"nothing was uploaded") as caught:
            DraftModelProvider().create(props_for(host, local, **expected))
        assert f"{local} on this machine" in str(caught.value)
        assert not (tmp_path / "host").exists(), "nothing of the rejected folder is on the host"


def test_an_upload_that_arrives_different_is_removed_and_the_folder_kept(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    host = make_draft(tmp_path / "host" / "eagle3", weights=b"the version in use")
    before = coreutils_digest(host)

    with pytest.raises(ArtifactError, match=r"the upload was removed from the host and .* left as it was"):
        put(Connection.local(), str(local), str(host), "e" * 64, timeout_s=60)

    assert sorted(path.name for path in (tmp_path / "host").iterdir()) == ["eagle3"]
    assert coreutils_digest(host) == before


def test_an_earlier_attempts_files_in_the_staging_folder_do_not_reach_the_artifact(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    host = make_draft(tmp_path / "host" / "eagle3", weights=b"the version in use")
    digest = local_tree_digest(local).digest
    # What an earlier upload of the same content left when it was cut short: a file the draft model
    # does not have, and one of its files half-written.
    staging = tmp_path / "host" / f"eagle3.upload-{digest[:16]}"
    (staging / "shards").mkdir(parents=True)
    (staging / "stray.bin").write_bytes(b"from an earlier attempt")
    (staging / "shards" / "model.safetensors").write_bytes(b"\x00wei")

    put(Connection.local(), str(local), str(host), digest, timeout_s=60)

    assert coreutils_digest(host) == digest
    assert sorted(str(p.relative_to(host)) for p in host.rglob("*")) == [
        "config.json",
        "shards",
        "shards/model.safetensors",
    ]
    assert sorted(path.name for path in (tmp_path / "host").iterdir()) == ["eagle3"]


def test_manifest_names_missing_and_changed_files(tmp_path: Path) -> None:
    host = make_draft(tmp_path / "on-host")
    good = local_tree_digest(host).file_digests()
    assert set(good) == {"config.json", "shards/model.safetensors"}
    DraftModelProvider().create(props_for(host, sha256_manifest=good))

    manifest = {**good, "shards/model.safetensors": "1" * 64, "tokenizer.json": "2" * 64}
    with pytest.raises(ArtifactError) as caught:
        DraftModelProvider().create(props_for(host, sha256_manifest=manifest))
    message = str(caught.value)
    assert "missing tokenizer.json" in message
    assert "different content in shards/model.safetensors" in message
    assert "config.json" not in message


def test_refresh_sees_changed_files_and_drops_a_removed_folder(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    host = tmp_path / "host" / "eagle3"
    provider = DraftModelProvider()
    outs = provider.create(props_for(host, local)).outs or {}

    (host / "shards" / "model.safetensors").write_bytes(b"corrupted")
    drifted = provider.read(str(host), outs)
    assert drifted.id == str(host)
    assert drifted.outs is not None and drifted.outs["digest"] != outs["digest"]
    # The next up sees the host no longer holds the local content and uploads it again.
    diff = provider.diff(str(host), drifted.outs, props_for(host, local))
    assert diff.changes and diff.replaces == []
    repaired = provider.update(str(host), drifted.outs, props_for(host, local)).outs or {}
    assert repaired["digest"] == outs["digest"]

    for file in sorted(host.rglob("*"), reverse=True):
        file.unlink() if file.is_file() else file.rmdir()
    host.rmdir()
    gone = provider.read(str(host), outs)
    assert gone.id is None and gone.outs == {}


@pytest.mark.parametrize(
    ("change", "replaces"),
    [
        ({"path_on_host": "/data/other"}, ["path_on_host"]),
        ({"source": "host", "local_path": None}, ["source"]),
        ({"connection": {"kind": "ssh", "host": "gpu-1", "port": 22, "user": "root"}}, ["connection"]),
        ({"sha256": "a" * 64}, []),
        ({"timeout_s": 5}, []),
    ],
)
def test_diff_replaces_for_another_folder_or_host_only(
    tmp_path: Path, change: Props, replaces: list[str]
) -> None:
    local = make_draft(tmp_path / "local")
    news = props_for(Path("/data/eagle3"), local)
    olds = {**news, "files": 2, "size_bytes": 1}
    assert not DraftModelProvider().diff("/data/eagle3", olds, news).changes
    diff = DraftModelProvider().diff("/data/eagle3", olds, {**news, **change})
    assert diff.changes and diff.replaces == replaces


def test_state_of_the_previous_version_validates(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    digest = local_tree_digest(local).digest
    # As the previous version stored it: numbers as floats, no sha256 nor manifest.
    old = {
        **props_for(Path("/data/eagle3"), local),
        "connection": {"kind": "ssh", "host": "gpu-1", "port": 2222.0, "user": "root", "host_key": None},
        "timeout_s": 3600.0,
        "digest": digest,
        "files": 2.0,
        "size_bytes": 11046.0,
    }
    inputs, outputs = DraftModelInputs.model_validate(old), DraftModelOutputs.model_validate(old)
    assert (inputs.connection.port, inputs.sha256, inputs.sha256_manifest) == (2222, None, None)
    assert (outputs.files, outputs.size_bytes) == (2, 11046) and isinstance(outputs.files, int)
    # Registered props: the host source with its outputs None still validates as inputs.
    assert DraftModelInputs.model_validate(props_for(Path("/data/eagle3"))).local_digest is None
    news = {**props_for(Path("/data/eagle3"), local), "connection": old["connection"], "timeout_s": 3600}
    assert not DraftModelProvider().diff("/data/eagle3", old, news).changes
    drift = DraftModelProvider().diff("/data/eagle3", {**old, "digest": "0" * 64}, news)
    assert drift.changes and not drift.replaces


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        (
            {"source": "local", "local_path": "/no/such/draft"},
            ArtifactError,
            "'/no/such/draft' does not exist",
        ),
        ({"source": "host", "sha256": "ABC"}, SpecError, "draftModel.sha256 'ABC'"),
        ({"source": "host", "sha256_manifest": {"w.bin": "xyz"}}, SpecError, "entries 'w.bin'"),
        (
            {"source": "host", "path_on_host": "relative/draft"},
            SpecError,
            "'relative/draft' is not an absolute",
        ),
        (
            {"source": "local", "local_path": ".", "path_on_host": "/data"},
            SpecError,
            "'/data' is a top-level",
        ),
        ({"source": "remote"}, SpecError, "draftModel.source 'remote'"),
        ({"source": "local"}, SpecError, "local_path is unset"),
    ],
)
def test_bad_inputs_fail_in_the_program_naming_the_value(
    kwargs: Props, error: type[Exception], named: str
) -> None:
    args: Props = {"connection": LOCAL, "path_on_host": "/data/eagle3/draft", **kwargs}
    with pytest.raises(error) as caught:
        DraftModel("draft", draft_model_args(**args))
    assert named in str(caught.value)


def test_empty_local_folder_fails_in_the_program(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match="holds no files"):
        DraftModel(
            "draft",
            draft_model_args(LOCAL, "local", "/data/e/d", local_path=str(tmp_path / "empty")),
        )


@pytest.mark.integration
def test_upload_and_check_over_ssh_with_the_connection_as_pulumi_delivers_it(tmp_path: Path) -> None:
    local = make_draft(tmp_path / "local")
    host = tmp_path / "ssh-host" / "eagle3"
    with start_sshd() as server:
        conn = server.connection()
        # Numbers arrive from the engine as floats.
        fields = {"kind": "ssh", "host": conn.host, "port": float(conn.port), "user": conn.user}
        fields |= {"private_key": conn.private_key, "host_key": conn.host_key}
        provider = DraftModelProvider()
        outs = provider.create(props_for(host, local, connection=fields)).outs or {}
        assert outs["digest"] == coreutils_digest(host) == local_tree_digest(local).digest
        (host / "config.json").unlink()
        drifted = provider.read(str(host), outs)
        assert drifted.outs is not None and drifted.outs["files"] == 1


PROGRAM = """
import os

import pulumi

from sglang_stacks.components.draft_model import DraftModel, draft_model_args

draft = DraftModel(
    "draft",
    draft_model_args(
        pulumi.Output.secret({"kind": "local"}),
        os.environ["TEST_DRAFT_SOURCE"],
        os.environ["TEST_DRAFT_PATH"],
        local_path=os.environ.get("TEST_DRAFT_LOCAL") or None,
        sha256=os.environ.get("TEST_DRAFT_SHA256") or None,
    ),
)
pulumi.export("digest", draft.output(lambda o: o.digest))
pulumi.export("files", draft.output(lambda o: o.files))
pulumi.export("path_on_host", draft.input(lambda i: i.path_on_host))
"""


def draft_state(workspace: Workspace) -> Props:
    """The DraftModel's outputs as the stack's state holds them (refresh changes these, not the
    stack outputs)."""
    (draft,) = [r for r in workspace.deployment("draft")["resources"] if r["urn"].endswith("::draft")]
    outputs: Props = draft["outputs"]
    return outputs


@pytest.mark.integration
def test_engine_uploads_notices_new_content_and_drift_and_stops_on_a_wrong_digest(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = make_draft(tmp_path / "local")
    host = tmp_path / "host" / "eagle3"
    monkeypatch.setenv("TEST_DRAFT_SOURCE", "local")
    monkeypatch.setenv("TEST_DRAFT_LOCAL", str(local))
    monkeypatch.setenv("TEST_DRAFT_PATH", str(host))
    workspace.use_program(PROGRAM)
    workspace.init_stack("draft")

    workspace.run("up", "--yes", "-s", "draft")
    first = workspace.outputs("draft")
    assert first == {"digest": coreutils_digest(host), "files": 2, "path_on_host": str(host)}
    workspace.run("up", "--yes", "--expect-no-changes", "-s", "draft")

    # New content: the preview already knows the new digest, so dependents plan their replacement.
    (local / "shards" / "model.safetensors").write_bytes(b"retrained" * 100)
    preview = workspace.json("preview", "--diff", "--json", "-s", "draft")
    steps = {step["urn"].rsplit("::", 1)[1]: step for step in preview["steps"]}
    assert steps["draft"]["op"] == "update"
    assert steps["draft"]["newState"]["inputs"]["digest"] == local_tree_digest(local).digest
    workspace.run("up", "--yes", "-s", "draft")
    second = workspace.outputs("draft")
    assert second["digest"] == coreutils_digest(local) != first["digest"]

    # Drift on the host: refresh shows it, the next up puts the local content back.
    (host / "config.json").write_text("{}")
    workspace.run("refresh", "--yes", "-s", "draft")
    assert draft_state(workspace)["digest"] == coreutils_digest(host) != second["digest"]
    workspace.run("up", "--yes", "-s", "draft")
    assert coreutils_digest(host) == second["digest"]

    # A draft model already on the host with the wrong expected digest stops the update.
    monkeypatch.setenv("TEST_DRAFT_SOURCE", "host")
    monkeypatch.setenv("TEST_DRAFT_LOCAL", "")
    monkeypatch.setenv("TEST_DRAFT_SHA256", "f" * 64)
    failed = workspace.run("up", "--yes", "-s", "draft", check=False)
    assert failed.returncode != 0
    assert f"has digest {second['digest']}, expected {'f' * 64}" in failed.stdout + failed.stderr
    assert draft_state(workspace)["digest"] == second["digest"]
    assert os.path.isdir(host)


@pytest.mark.integration
def test_an_upload_killed_midway_leaves_the_artifact_and_the_next_up_completes_it(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = make_draft(tmp_path / "local")
    host = tmp_path / "host" / "eagle3"
    monkeypatch.setenv("TEST_DRAFT_SOURCE", "local")
    monkeypatch.setenv("TEST_DRAFT_LOCAL", str(local))
    monkeypatch.setenv("TEST_DRAFT_PATH", str(host))
    workspace.use_program(PROGRAM)
    workspace.init_stack("draft")
    workspace.run("up", "--yes", "-s", "draft")
    first = coreutils_digest(host)
    # New weights, large enough that their upload takes a while.
    (local / "shards" / "model.safetensors").write_bytes(os.urandom(1 << 20) * 96)
    second = local_tree_digest(local).digest
    staging = host.parent / f"eagle3.upload-{second[:16]}"
    update = subprocess.Popen(
        ["pulumi", "up", "--yes", "--skip-preview", "--non-interactive", "-s", "draft"],
        cwd=workspace.path,
        env=workspace.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Killed outright with everything it started (the CLI, the provider, the host's tar), as a
    # crash of the machine would, once the upload has begun to arrive.
    deadline = time.monotonic() + 120
    while not any(path.is_file() for path in staging.rglob("*")):
        assert update.poll() is None and time.monotonic() < deadline, "the upload never started"
        time.sleep(0.01)
    kill_tree(update.pid)
    update.wait()

    assert coreutils_digest(host) == first, "the artifact changed while its upload was cut short"
    assert local_tree_digest(staging).digest != second, "the upload was not cut short midway"

    recovered = workspace.cli("recover", "draft", timeout_s=120)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    workspace.run("up", "--yes", "--skip-preview", "-s", "draft")

    assert coreutils_digest(host) == second
    assert sorted(path.name for path in host.parent.iterdir()) == ["eagle3"]
