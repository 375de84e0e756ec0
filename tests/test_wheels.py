"""The wheel cache: where it is, and unpacking that survives crashes and concurrent runs."""

import subprocess
import zipfile
from pathlib import Path

import pytest

from sglang_flags import wheels
from sglang_flags.wheels import WheelError, default_cache


def _wheel(folder: Path, name: str = "sglang-9.9.9-py3-none-any.whl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sglang/__init__.py", "VERSION = '9.9.9'\n")
    return path


def test_the_cache_follows_sglang_stacks_cache_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("SGLANG_STACKS_CACHE", str(tmp_path / "stacks"))
    assert default_cache() == tmp_path / "stacks" / "wheels"
    monkeypatch.delenv("SGLANG_STACKS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache() == tmp_path / "xdg" / "sglang-stacks" / "wheels"


def test_a_cached_wheel_is_unpacked_once_and_a_half_unpacked_folder_is_redone(tmp_path):
    _wheel(tmp_path / "downloads")
    target = tmp_path / "unpacked" / "sglang-9.9.9"
    (target / "sglang").mkdir(parents=True)  # left by a run that died mid-way: no completion mark
    assert wheels.unpacked_release("9.9.9", tmp_path) == target
    assert (target / "sglang" / "__init__.py").read_text() == "VERSION = '9.9.9'\n"
    (target / "sglang" / "__init__.py").write_text("kept")
    wheels.unpacked_release("9.9.9", tmp_path)
    assert (target / "sglang" / "__init__.py").read_text() == "kept"
    assert [p.name for p in target.parent.iterdir()] == ["sglang-9.9.9"]


def test_a_truncated_wheel_is_removed_so_the_next_run_downloads_it_again(tmp_path):
    broken = tmp_path / "downloads" / "sglang-9.9.9-py3-none-any.whl"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a zip")
    with pytest.raises(WheelError, match="is not a readable wheel"):
        wheels.unpacked_release("9.9.9", tmp_path)
    assert not broken.exists()


def test_a_wheel_being_downloaded_is_not_seen_in_the_cache_until_it_is_whole(monkeypatch, tmp_path):
    """The suite's workers share one cache: while one downloads a release, another looking for the
    same wheel must not find (and unzip, and delete as broken) the half-written file."""
    seen_while_downloading = []

    def pip(command, **kwargs):
        dest = Path(command[command.index("--dest") + 1])
        half = dest / "sglang-9.9.9-py3-none-any.whl"
        half.write_bytes(b"PK\x03\x04 half of it")
        seen_while_downloading.append(wheels._find_wheel(tmp_path / "downloads", "sglang", "9.9.9"))
        _wheel(dest)  # the download completes
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", pip)
    assert wheels.unpacked_release("9.9.9", tmp_path) == tmp_path / "unpacked" / "sglang-9.9.9"
    assert seen_while_downloading == [None]
    assert [p.name for p in (tmp_path / "downloads").iterdir()] == ["sglang-9.9.9-py3-none-any.whl"]
