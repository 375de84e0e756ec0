"""The draft model's files on a host: a folder's sha256 tree digest, computed here for a local
folder and on the host (``tree_digest.sh``) for the copy there, the upload that replaces the copy
whole (``swap_folder.sh``), and the check against the digests a stack expects.

An upload lands in a staging folder beside the folder in use, emptied first, and takes its place
only once its digest is the one expected: a half-written upload (a killed update, a dropped
connection) never becomes the artifact, and the next upload starts clean. The swap is two renames;
one cut short between them is undone by the next swap, which puts the previous folder back first.

The tree digest is the sha256 of the folder's ``sha256sum`` listing: one ``<sha256>  ./<path>``
line per file (symbolic links followed), sorted by path byte by byte.

Nothing rejected stays on a host: a local folder that is not what the stack expects is refused
before anything is uploaded, and an upload whose copy arrives different is removed before it
takes the folder's place.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sglang_stacks.errors import ArtifactError, HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.runner import call
from sglang_stacks.hostops.programs.swap_folder_contract import SwapFolder
from sglang_stacks.hostops.programs.tree_digest_contract import ListTree
from sglang_stacks.hostops.transport import HostPath, run, upload

__all__ = ["TreeDigest", "check_before_upload", "local_tree_digest", "measure", "put", "verify"]

_CHUNK = 1 << 20
# sha256sum escapes these in the names it prints; a local listing could not match the host's.
_UNLISTABLE = ("\\", "\n", "\r")
_REMOVE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TreeDigest:
    """What the hashing pass over a draft-model folder found."""

    digest: str
    """sha256 of the folder's sorted ``sha256sum`` listing."""
    files: int
    """Number of files."""
    size_bytes: int
    """Total size of the files."""
    listing: str
    """The listing itself: ``<sha256>  ./<path>`` lines."""

    def file_digests(self) -> dict[str, str]:
        """Relative path -> sha256 of each file, read back from the listing."""
        found = {}
        for line in self.listing.splitlines():
            digest, _, path = line.partition("  ")
            found[path.removeprefix("./")] = digest.lstrip("\\")
        return found


def local_tree_digest(folder: str | os.PathLike[str]) -> TreeDigest:
    """The tree digest of a folder on this machine, as the host's ``sha256sum`` listing gives it."""
    root = Path(folder)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise ArtifactError(
            f"draftModel.local_path {str(root)!r} {what} on this machine. Point it at the draft model's "
            "folder, or set draftModel.source to host if the files are already on the GPU host."
        )
    entries: list[tuple[bytes, str, Path]] = []
    for parent, _dirs, names in os.walk(root, followlinks=True):
        for name in names:
            path = Path(parent) / name
            if not path.is_file():
                continue
            relative = "./" + path.relative_to(root).as_posix()
            if any(ch in relative for ch in _UNLISTABLE):
                raise ArtifactError(
                    f"The draft model file {relative!r} in {str(root)!r} has a backslash or line break in "
                    "its name, which its sha256 listing cannot hold. Rename the file."
                )
            entries.append((os.fsencode(relative), relative, path))
    if not entries:
        raise ArtifactError(
            f"draftModel.local_path {str(root)!r} holds no files. Point it at the folder with the draft "
            "model's config.json and weights."
        )
    lines, size_bytes = [], 0
    for _key, relative, path in sorted(entries):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        size_bytes += path.stat().st_size
        lines.append(f"{digest.hexdigest()}  {relative}\n")
    listing = "".join(lines)
    return TreeDigest(hashlib.sha256(listing.encode()).hexdigest(), len(lines), size_bytes, listing)


def measure(conn: Connection, path: str, timeout_s: float) -> TreeDigest | None:
    """The tree digest of ``path`` on the host, or None when there is no such folder."""
    listing = call(conn, ListTree(folder=path, limit_s=timeout_s))
    if listing is None:
        return None
    files = sum(1 for line in listing.text.splitlines() if line)
    digest = hashlib.sha256(listing.text.encode()).hexdigest()
    return TreeDigest(digest, files, listing.size_bytes, listing.text)


def put(conn: Connection, local_path: str, path: str, expected_digest: str, timeout_s: float) -> TreeDigest:
    """Uploads ``local_path`` to take the place of ``path`` on the host; ArtifactError, with the
    upload removed and ``path`` as it was, unless the copy there has ``expected_digest``."""
    # Named by its content, and emptied before the upload: an upload cut short (a killed update)
    # is replaced by the next one of the same content instead of piling up beside it, and none of
    # its files mixes into the next.
    staging = f"{path.rstrip('/')}.upload-{expected_digest[:16]}"
    try:
        upload(conn, local_path, staging, timeout_s=timeout_s, fresh=True)
        arrived = measure(conn, staging, timeout_s)
        if arrived is None or arrived.digest != expected_digest:
            raise ArtifactError(
                f"The draft model uploaded from {local_path} to {path} on {conn.label} arrived "
                f"with digest {arrived.digest if arrived else 'none'}, but the local folder has "
                f"{expected_digest}; the upload was removed from the host and {path} left as it was. "
                "Check the host's free disk space and that nothing else writes there, then run the "
                "update again."
            )
    except Exception:
        _remove(conn, staging)
        raise
    call(conn, SwapFolder(staging=staging, folder=path))
    return arrived


def _remove(conn: Connection, staging: str) -> None:
    """Removes an upload that will not be used; a host that cannot be reached keeps it until the
    next upload of the same content writes over it."""
    with contextlib.suppress(HostError):
        run(conn, 'rm -rf -- "$STAGING"\n', timeout_s=_REMOVE_TIMEOUT_S, env={"STAGING": HostPath(staging)})


def check_before_upload(
    local_path: str, local_digest: str, sha256: str | None, manifest: Mapping[str, str] | None
) -> None:
    """ArtifactError when the local folder is not what the stack expects (``sha256``, the
    ``manifest``): refused before anything is uploaded, so no rejected copy reaches the host."""
    where = f"{local_path} on this machine"
    if sha256 is not None and local_digest != sha256:
        raise ArtifactError(
            f"The draft model folder {where} has digest {local_digest}, expected {sha256}; nothing "
            "was uploaded. Point draftModel.local_path at the expected folder, or fix "
            "draftModel.sha256 if the new content is intended."
        )
    if manifest:
        problems = _manifest_problems(local_tree_digest(local_path), manifest)
        if problems:
            raise ArtifactError(
                f"The draft model folder {where} does not match draftModel.sha256_manifest: {problems}; "
                "nothing was uploaded. Fix the folder, or the manifest if the new content is intended."
            )


def verify(
    conn: Connection,
    path: str,
    found: TreeDigest | None,
    sha256: str | None,
    manifest: Mapping[str, str] | None,
) -> TreeDigest:
    """``found``, once it is sure to exist, hold files and match what the stack expects
    (ArtifactError otherwise)."""
    where = f"{path} on {conn.label}"
    if found is None:
        raise ArtifactError(
            f"There is no draft model at {where}. Copy the draft model there, or set draftModel.source "
            "to local with local_path pointing at a copy on this machine."
        )
    if found.files == 0:
        raise ArtifactError(
            f"The draft model folder {where} is empty. Copy the draft model's files (config.json and "
            "the weights) there, or point draftModel.path_on_host at the folder that holds them."
        )
    if sha256 is not None and found.digest != sha256:
        raise ArtifactError(
            f"The draft model at {where} has digest {found.digest}, expected {sha256}. Re-upload the "
            "draft model, or fix draftModel.sha256 if the new content is intended."
        )
    if manifest:
        problems = _manifest_problems(found, manifest)
        if problems:
            raise ArtifactError(
                f"The draft model at {where} does not match draftModel.sha256_manifest: "
                f"{problems}. Re-upload the draft model, or fix the manifest if the new "
                "content is intended."
            )
    return found


def _manifest_problems(found: TreeDigest, manifest: Mapping[str, str]) -> str:
    """How ``found`` differs from ``manifest`` (files missing, files different), or empty."""
    present = found.file_digests()
    missing = [name for name in manifest if name.removeprefix("./") not in present]
    different = [
        name
        for name, digest in manifest.items()
        if name.removeprefix("./") in present and present[name.removeprefix("./")] != digest
    ]
    problems = []
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if different:
        problems.append(f"different content in {', '.join(different)}")
    return "; ".join(problems)
