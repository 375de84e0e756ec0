"""The draft model's host programs (tree_digest.sh, swap_folder.sh) run here on temporary folders."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sglang_stacks.hostops.artifacts import local_tree_digest, put
from sglang_stacks.hostops.connection import Connection
from tests._programs import run_sh, unreadable_file


def test_tree_digest_lists_every_file_sorted_with_the_total_size(tmp_path: Path) -> None:
    folder = tmp_path / "draft"
    (folder / "b").mkdir(parents=True)
    (folder / "b" / "w.bin").write_bytes(b"\x00" * 100)
    (folder / "a.json").write_text("{}")
    (folder / "link.json").symlink_to(folder / "a.json")

    done = run_sh("tree_digest.sh", folder=str(folder))

    first, _, listing = done.stdout.partition("\n")
    assert done.returncode == 0 and first == "present 104"
    assert [line.split("  ")[1] for line in listing.splitlines()] == ["./a.json", "./b/w.bin", "./link.json"]
    # The same listing this machine computes for the folder.
    assert hashlib.sha256(listing.encode()).hexdigest() == local_tree_digest(folder).digest


def test_tree_digest_says_absent_for_a_missing_folder(tmp_path: Path) -> None:
    assert run_sh("tree_digest.sh", folder=str(tmp_path / "none")).stdout == "absent\n"


def test_tree_digest_fails_on_an_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    unreadable_file(tmp_path / "secret")
    done = run_sh("tree_digest.sh", folder=str(tmp_path))
    assert done.returncode == 5 and "./secret: Input/output error" in done.stderr


def test_swap_replaces_the_folder_whole_and_removes_the_upload(tmp_path: Path) -> None:
    folder, staging = tmp_path / "draft", tmp_path / "draft.upload-1"
    folder.mkdir()
    (folder / "stale.bin").write_text("old")
    staging.mkdir()
    (staging / "new.bin").write_text("new")

    done = run_sh("swap_folder.sh", staging=str(staging), folder=str(folder))

    assert done.returncode == 0, done.stderr
    assert [p.name for p in folder.iterdir()] == ["new.bin"]
    assert not staging.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft"]


def test_a_swap_cut_short_between_its_renames_is_undone_by_the_next(tmp_path: Path) -> None:
    # The folder in use was renamed aside, and then the swap was killed: none in its place.
    folder, aside = tmp_path / "draft", tmp_path / "draft.replaced"
    aside.mkdir()
    (aside / "in-use.bin").write_text("old")
    staging = tmp_path / "draft.upload-2"
    staging.mkdir()
    (staging / "new.bin").write_text("new")

    done = run_sh("swap_folder.sh", staging=str(staging), folder=str(folder))

    assert done.returncode == 0, done.stderr
    assert [p.name for p in folder.iterdir()] == ["new.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft"]


def test_a_draft_model_put_under_the_home_folder_lands_there(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # where a folder literally named ~ would appear
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "f").write_text("x")
    expected = local_tree_digest(tmp_path / "up").digest
    put(Connection.local(), str(tmp_path / "up"), "~/draft", expected, timeout_s=60)
    assert (tmp_path / "home" / "draft" / "f").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "up"]
