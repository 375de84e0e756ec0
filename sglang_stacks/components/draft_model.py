"""DraftModel: the EAGLE-3 draft model's files on the GPU host, uploaded from this machine or found
there, and proven by a sha256 tree digest computed on the host before any server uses them.

The tree digest is the sha256 of the folder's ``sha256sum`` listing: one ``<sha256>  ./<path>``
line per file (symbolic links followed), sorted by path byte by byte. This machine computes the
same listing for a local folder, so an upload is checked end to end and the digest of a local
draft model is known before it is deployed.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import pulumi
import pulumi.dynamic as dynamic

from sglang_stacks.components._resource import (
    connect,
    connection_diff,
    keep_connection_secret,
    plain_errors,
    tail,
)
from sglang_stacks.errors import ArtifactError, HostError, SpecError
from sglang_stacks.hostops.transport import Connection, quote_path, run, upload

__all__ = ["DraftModel", "Source", "TreeDigest", "local_tree_digest"]

Source = Literal["local", "host"]
"""``local``: a folder on this machine, uploaded; ``host``: a folder already on the host."""

DEFAULT_TIMEOUT_S = 3600.0
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20
# sha256sum escapes these in the names it prints; a local listing could not match the host's.
_UNLISTABLE = ("\\", "\n", "\r")


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


def _measure_script(path: str) -> str:
    """Prints ``absent``, or ``present <total bytes>`` followed by the folder's sorted listing."""
    return f"""
set -o pipefail
D={quote_path(path)}
if [ ! -d "$D" ]; then echo absent; exit 0; fi
cd "$D" || exit 3
size=$(LC_ALL=C find -L . -type f -printf '%s\\n' | awk '{{s += $1}} END {{printf "%.0f", s}}') || exit 4
echo "present $size"
LC_ALL=C find -L . -type f -print0 | LC_ALL=C sort -z | LC_ALL=C xargs -0 -r sha256sum -- || exit 5
"""


def _swap_script(staging: str, path: str) -> str:
    """Puts the uploaded folder in place of ``path``, so no stale file survives a new version."""
    return f"""
set -e
S={quote_path(staging)}
D={quote_path(path)}
trap 'rm -rf "$S"' EXIT
old="$D.replaced-$$"
if [ -e "$D" ]; then mv "$D" "$old"; fi
mv "$S" "$D"
rm -rf "$old"
"""


def _validate(
    source: str,
    local_path: str | None,
    path_on_host: str,
    sha256: str | None,
    manifest: Mapping[str, str] | None,
) -> None:
    if source not in get_args(Source):
        raise SpecError(
            f"draftModel.source {source!r} is not known; allowed: 'local' (upload a folder from this "
            "machine) or 'host' (already on the GPU host). Set one of them."
        )
    if source == "local" and not local_path:
        raise SpecError(
            "draftModel.source is local but local_path is unset. Set local_path to the folder to upload."
        )
    if source == "host" and local_path:
        raise SpecError(
            f"draftModel.local_path {local_path!r} is set but source is host. Remove local_path, or set "
            "source to local to upload it."
        )
    parts = [part for part in path_on_host.split("/") if part]
    if not path_on_host.startswith("/") or not parts or any(ord(ch) < 32 for ch in path_on_host):
        raise SpecError(
            f"draftModel.path_on_host {path_on_host!r} is not an absolute folder on the host. "
            "Write it like /data/eagle3/draft."
        )
    if source == "local" and len(parts) < 2:
        raise SpecError(
            f"draftModel.path_on_host {path_on_host!r} is a top-level folder; an upload replaces the whole "
            "folder, so it must be one of its own, like /data/eagle3/draft."
        )
    if sha256 is not None and not _SHA256.match(sha256):
        raise SpecError(
            f"draftModel.sha256 {sha256!r} is not a sha256 digest; it needs 64 lowercase hex digits. "
            "Copy the digest output of a deployed stack, or remove the key."
        )
    bad = [name for name, digest in (manifest or {}).items() if not _SHA256.match(str(digest))]
    if bad:
        raise SpecError(
            f"draftModel.sha256_manifest entries {', '.join(map(repr, bad))} are not sha256 digests; each "
            "needs 64 lowercase hex digits, as `sha256sum` prints them. Fix those entries."
        )


@plain_errors
class _DraftModelProvider(dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        outs = self._converge(props)
        return dynamic.CreateResult(outs["path_on_host"], outs)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(self._converge(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        replaces = [key for key in ("source", "path_on_host") if olds.get(key) != news.get(key)]
        changed, new_host = connection_diff(olds, news)
        if new_host:
            replaces.append("connection")
        inputs = ("local_path", "local_digest", "sha256", "sha256_manifest", "timeout_s")
        updates = [key for key in inputs if olds.get(key) != news.get(key)]
        # What refresh found on the host no longer matches what the stack asks for: upload again
        # (local) or stop with the mismatch (host).
        wanted = news.get("local_digest") or news.get("sha256")
        if wanted and olds.get("digest") != wanted:
            updates.append("digest")
        return dynamic.DiffResult(
            changes=bool(replaces or updates or changed), replaces=replaces, delete_before_replace=False
        )

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        found = _measure(connect(props), props["path_on_host"], float(props["timeout_s"]))
        # Gone or emptied on the host: refresh drops it and the next up uploads or checks again.
        if found is None or found.files == 0:
            return dynamic.ReadResult(None, {})
        return dynamic.ReadResult(id_, _outputs(props, found))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        # Left on the host on purpose: other stacks on the same host read the same draft model,
        # and it is gigabytes to upload again.
        return None

    def _converge(self, props: dict[str, Any]) -> dict[str, Any]:
        source, path = props["source"], props["path_on_host"]
        _validate(source, props.get("local_path"), path, props.get("sha256"), props.get("sha256_manifest"))
        conn = connect(props)
        timeout_s = float(props["timeout_s"])
        found = _measure(conn, path, timeout_s)
        if source == "local" and (found is None or found.digest != props["local_digest"]):
            staging = f"{path.rstrip('/')}.upload-{secrets.token_hex(4)}"
            upload(conn, props["local_path"], staging, timeout_s=timeout_s)
            swapped = run(conn, _swap_script(staging, path), timeout_s=120)
            if not swapped.ok:
                raise HostError(
                    f"Moving the uploaded draft model into {path} on {conn.label} failed: "
                    f"{tail(swapped.stderr)}. Check that the user may write to {path} and its parent, "
                    "then run the update again."
                )
            found = _measure(conn, path, timeout_s)
            if found is None or found.digest != props["local_digest"]:
                raise ArtifactError(
                    f"The draft model uploaded from {props['local_path']} to {path} on {conn.label} arrived "
                    f"with digest {found.digest if found else 'none'}, but the local folder has "
                    f"{props['local_digest']}. Check the host's free disk space and that nothing else writes "
                    "there, then run the update again."
                )
        _verify(conn, path, found, props.get("sha256"), props.get("sha256_manifest"))
        assert found is not None  # _verify raised otherwise
        return _outputs(props, found)


def _outputs(props: Mapping[str, Any], found: TreeDigest) -> dict[str, Any]:
    return {**props, "digest": found.digest, "files": found.files, "size_bytes": found.size_bytes}


def _measure(conn: Connection, path: str, timeout_s: float) -> TreeDigest | None:
    """The tree digest of ``path`` on the host, or None when there is no such folder."""
    result = run(conn, _measure_script(path), timeout_s=timeout_s)
    first, _, listing = result.stdout.partition("\n")
    if not result.ok or not first.startswith(("absent", "present")):
        raise ArtifactError(
            f"Hashing the draft model at {path} on {conn.label} failed (exit {result.exit_code}): "
            f"{tail(result.stderr or result.stdout)}. Fix the unreadable files or broken links it names, "
            "then run the update again."
        )
    if first == "absent":
        return None
    size_bytes = int(first.split()[1])
    files = sum(1 for line in listing.splitlines() if line)
    return TreeDigest(hashlib.sha256(listing.encode()).hexdigest(), files, size_bytes, listing)


def _verify(
    conn: Connection,
    path: str,
    found: TreeDigest | None,
    sha256: str | None,
    manifest: Mapping[str, str] | None,
) -> None:
    """Raises ArtifactError unless the folder exists, holds files and matches what the stack expects."""
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
        on_host = found.file_digests()
        missing = [name for name in manifest if name.removeprefix("./") not in on_host]
        different = [
            name
            for name, digest in manifest.items()
            if name.removeprefix("./") in on_host and on_host[name.removeprefix("./")] != digest
        ]
        if missing or different:
            problems = []
            if missing:
                problems.append(f"missing {', '.join(missing)}")
            if different:
                problems.append(f"different content in {', '.join(different)}")
            raise ArtifactError(
                f"The draft model at {where} does not match draftModel.sha256_manifest: "
                f"{'; '.join(problems)}. Re-upload the draft model, or fix the manifest if the new "
                "content is intended."
            )


class DraftModel(dynamic.Resource, module="sglang", name="DraftModel"):
    """The EAGLE-3 draft model's folder on the GPU host, verified by its sha256 tree digest.

    ``source="local"`` uploads ``local_path`` from this machine; the folder on the host then
    holds exactly those files (a new version replaces it whole). ``source="host"`` uses the
    folder already at ``path_on_host``. Either way the digest is computed on the host; a missing
    or empty folder, a digest other than ``sha256`` or a file that differs from
    ``sha256_manifest`` is an ArtifactError before any server starts.

    New local content updates the resource and changes ``digest``, which the server takes as an
    input so that it is replaced. A refresh hashes the folder again, so files changed or removed
    on the host show up. Destroying it leaves the files: other stacks on the host may read them.
    """

    path_on_host: pulumi.Output[str]
    """Absolute folder on the host the server reads the draft model from."""
    digest: pulumi.Output[str]
    """sha256 tree digest of the folder as found on the host."""
    files: pulumi.Output[int]
    """Number of files in the folder."""
    size_bytes: pulumi.Output[int]
    """Total size of the files."""

    def __init__(
        self,
        name: str,
        *,
        connection: pulumi.Input[Mapping[str, Any]],
        source: Source,
        path_on_host: str,
        local_path: str | None = None,
        sha256: str | None = None,
        sha256_manifest: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``connection`` is the host's connection dict, passed as a Pulumi secret; ``sha256`` is
        the expected tree digest and ``sha256_manifest`` maps relative file paths to their sha256;
        ``timeout_s`` bounds each upload and each hashing pass on the host.

        A local folder is hashed here, so a missing or empty one fails the preview, and the
        digest of new content is known before it is uploaded.
        """
        _validate(source, local_path, path_on_host, sha256, sha256_manifest)
        local_digest = local_tree_digest(local_path).digest if source == "local" and local_path else None
        props: dict[str, Any] = {
            "connection": connection,
            "source": source,
            "local_path": str(Path(local_path).resolve()) if local_path else None,
            "local_digest": local_digest,
            "path_on_host": path_on_host,
            "sha256": sha256,
            "sha256_manifest": dict(sha256_manifest) if sha256_manifest else None,
            "timeout_s": timeout_s,
            "digest": local_digest or sha256,
            "files": None,
            "size_bytes": None,
        }
        super().__init__(_DraftModelProvider(), name, props, keep_connection_secret(opts))
