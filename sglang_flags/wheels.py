"""Release wheels on this machine: downloaded with pip (no dependencies) into a cache, unpacked once.

The cache is ``$SGLANG_STACKS_CACHE/wheels`` (default ``~/.cache/sglang-stacks/wheels``), or the
folder passed as ``cache``. A wheel is only read, never installed: the parser is built from the
unpacked folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "EXECUTION_HELPERS",
    "HELPER_WHEELS",
    "WheelError",
    "default_cache",
    "unpacked_helpers",
    "unpacked_release",
]

HELPER_WHEELS = {"msgspec": "0.23.0"}
"""Small packages whose real code defines parser fields, by pinned version. From 0.5.2x on,
``ServerArgs`` is a ``msgspec.defstruct`` whose fields become the options, so msgspec must be real
for the parser to exist at all. Each is downloaded like a release and put on the path, never
installed."""

EXECUTION_HELPERS = {**HELPER_WHEELS, "packaging": "25.0"}
"""The helpers of a release run as a server runs it (``sglang_world.execute``), its asserts kept: some
releases assert at import on ``packaging``'s comparison of torch's version (0.5.8's fla utilities:
"Only cuda device is supported for PyTorch version < 2.4.0"), which a stand-in cannot answer."""

_DONE = ".unpacked"  # marks a complete folder


class WheelError(Exception):
    """A wheel could not be downloaded or unpacked; the message says which and why."""


def default_cache() -> Path:
    """``$SGLANG_STACKS_CACHE/wheels``, else ``sglang-stacks/wheels`` in the user cache folder."""
    root = os.environ.get("SGLANG_STACKS_CACHE")
    if root:
        return Path(root) / "wheels"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "sglang-stacks" / "wheels"


def _find_wheel(folder: Path, package: str, version: str) -> Path | None:
    found = sorted(folder.glob(f"{package}-{version}-*.whl"))
    return found[0] if found else None


def _download(package: str, version: str, cache: Path) -> Path:
    """The wheel of ``package==version`` in ``cache``, downloaded with pip when not there yet."""
    folder = cache / "downloads"
    wheel = _find_wheel(folder, package, version)
    if wheel is not None:
        return wheel
    # Into a private folder first, then renamed into the cache: two runs downloading the same wheel
    # (the test suite's workers) never see each other's half-written file.
    private = folder / f".partial-{os.getpid()}"
    private.mkdir(parents=True, exist_ok=True)
    try:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        command += ["--disable-pip-version-check", "--dest", str(private), f"{package}=={version}"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        downloaded = _find_wheel(private, package, version)
        if result.returncode != 0 or downloaded is None:
            last = (result.stderr.strip().splitlines() or ["pip printed nothing"])[-1]
            raise WheelError(
                f"pip could not download a wheel of {package}=={version} ({last}). Check that the release "
                f"exists (pip index versions {package}) and that the package index is reachable."
            )
        os.replace(downloaded, folder / downloaded.name)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    wheel = _find_wheel(folder, package, version)
    assert wheel is not None  # renamed into the folder above
    return wheel


def _unpack(wheel: Path, target: Path) -> Path:
    """``wheel`` extracted into ``target``, once: into a private folder first, then renamed, so two
    runs sharing the cache never see each other's half-written files."""
    if (target / _DONE).exists():
        return target
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(partial)
    except zipfile.BadZipFile as error:
        wheel.unlink()  # a truncated download: the next run fetches it again
        raise WheelError(
            f"{wheel.name} is not a readable wheel ({error}); run again to download it anew."
        ) from None
    (partial / _DONE).write_text(wheel.name, encoding="utf-8")
    if target.exists() and not (target / _DONE).exists():
        shutil.rmtree(target)  # left half-written by an older run that died
    try:
        partial.rename(target)
    except OSError:
        shutil.rmtree(partial)  # another run finished first; its folder is as good
        if not (target / _DONE).exists():
            raise
    return target


def unpacked_release(release: str, cache: Path) -> Path:
    """The folder holding the unpacked ``sglang==release`` wheel (its ``sglang/`` package inside)."""
    wheel = _download("sglang", release, cache)
    return _unpack(wheel, cache / "unpacked" / f"sglang-{release}")


def unpacked_helpers(cache: Path, helpers: Mapping[str, str] = HELPER_WHEELS) -> list[Path]:
    """The unpacked folders of ``helpers`` (``HELPER_WHEELS`` unless named), to put on the path
    before the release."""
    return [
        _unpack(_download(name, version, cache), cache / "unpacked" / f"{name}-{version}")
        for name, version in helpers.items()
    ]
