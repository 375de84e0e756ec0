"""The wheel cache: where it is, and unpacking that survives crashes and concurrent runs."""

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
