"""The load generator, run on the GPU host next to the server: ``contract`` (standard library only)
says what it takes and prints, ``client`` (the standard library and aiohttp) does the measuring.

The package reaches the host as it is, as a tar stream (``bundle``), and runs there with the
host's Python as ``python -m loadgen``; so its modules import each other only relatively, and
nothing else of sglang-stacks.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["PACKAGE_NAME", "bundle", "source_files"]

PACKAGE_NAME = "loadgen"
"""The package's name on the host: ``python -m loadgen`` in the folder it is unpacked into."""


def bundle(extra: Mapping[str, bytes] | None = None) -> bytes:
    """The package's source files as an uncompressed tar stream, under ``loadgen/``; ``extra``
    files (a dataset) beside the package folder, by name."""
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w") as archive:
        for source in sorted(Path(__file__).parent.glob("*.py")):
            info = archive.gettarinfo(str(source), arcname=f"{PACKAGE_NAME}/{source.name}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with source.open("rb") as handle:
                archive.addfile(info, handle)
        for name, data in sorted((extra or {}).items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return stream.getvalue()


def source_files() -> dict[str, str]:
    """The package's source files by file name: what a cluster's benchmark pod mounts as ``loadgen/``
    (from a ConfigMap, whose keys are file names)."""
    return {source.name: source.read_text() for source in sorted(Path(__file__).parent.glob("*.py"))}
