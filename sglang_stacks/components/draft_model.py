"""DraftModel: the EAGLE-3 draft model's files on the GPU host, uploaded from this machine or found
there, and proven by a sha256 tree digest computed on the host before any server uses them.

The tree digest (`sglang_stacks.hostops.artifacts`) is the sha256 of the folder's ``sha256sum``
listing. This machine computes the same listing for a local folder, so an upload is checked end
to end and the digest of a local draft model is known before it is deployed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pulumi

from sglang_stacks.components._refresh import HOST_READS
from sglang_stacks.errors import SpecError
from sglang_stacks.hostops import artifacts
from sglang_stacks.hostops.artifacts import TreeDigest, local_tree_digest
from sglang_stacks.resources.provider import REPLACES, UPDATES, HostInputs, Props, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for

__all__ = [
    "DraftModel",
    "DraftModelArgs",
    "DraftModelInputs",
    "DraftModelOutputs",
    "DraftModelProvider",
    "Source",
    "TreeDigest",
    "draft_model_args",
    "local_tree_digest",
]

Source = Literal["local", "host"]
"""``local``: a folder on this machine, uploaded; ``host``: a folder already on the host."""

DEFAULT_TIMEOUT_S = 3600.0
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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


class DraftModelInputs(HostInputs):
    """Where the draft model comes from, where it goes, and what it must hash to."""

    source: Annotated[Source, REPLACES]
    """``local`` (uploaded from this machine) or ``host`` (already there)."""
    path_on_host: Annotated[str, REPLACES]
    """Absolute folder on the host the server reads the draft model from."""
    local_path: Annotated[str | None, UPDATES] = None
    """The folder on this machine, for ``local``."""
    local_digest: Annotated[str | None, UPDATES] = None
    """The local folder's tree digest, computed when the program runs: new content updates."""
    sha256: Annotated[str | None, UPDATES] = None
    """The tree digest the folder must have."""
    sha256_manifest: Annotated[dict[str, str] | None, UPDATES] = None
    """Relative file path -> sha256 each file must have."""
    timeout_s: Annotated[float, UPDATES] = DEFAULT_TIMEOUT_S
    """Bounds each upload and each hashing pass on the host."""


class DraftModelOutputs(Props):
    """The folder as found on the host."""

    digest: str
    """sha256 tree digest of the folder as found on the host."""
    files: int
    """Number of files in the folder."""
    size_bytes: int
    """Total size of the files."""


def _outputs(found: TreeDigest) -> DraftModelOutputs:
    return DraftModelOutputs(digest=found.digest, files=found.files, size_bytes=found.size_bytes)


def _converge(inputs: DraftModelInputs) -> DraftModelOutputs:
    """Uploads when the host's copy differs from the local folder, then checks what is there."""
    path = inputs.path_on_host
    _validate(inputs.source, inputs.local_path, path, inputs.sha256, inputs.sha256_manifest)
    conn = inputs.connection
    found = artifacts.measure(conn, path, inputs.timeout_s)
    local, digest = inputs.local_path, inputs.local_digest
    if inputs.source == "local" and local and digest and (found is None or found.digest != digest):
        artifacts.check_before_upload(local, digest, inputs.sha256, inputs.sha256_manifest)
        found = artifacts.put(conn, local, path, digest, inputs.timeout_s)
    return _outputs(artifacts.verify(conn, path, found, inputs.sha256, inputs.sha256_manifest))


class DraftModelProvider(TypedProvider[DraftModelInputs, DraftModelOutputs]):
    """Uploads or finds the folder on create and update, hashes it again on refresh; delete
    leaves the files."""

    gathers_with = HOST_READS

    inputs = DraftModelInputs
    outputs = DraftModelOutputs

    def resource_id(self, inputs: DraftModelInputs, outputs: DraftModelOutputs) -> str:
        return inputs.path_on_host

    def create_typed(self, inputs: DraftModelInputs) -> DraftModelOutputs:
        return _converge(inputs)

    def update_typed(
        self, olds: DraftModelOutputs, old_inputs: DraftModelInputs, news: DraftModelInputs
    ) -> DraftModelOutputs:
        return _converge(news)

    def drifted(self, outputs: DraftModelOutputs, news: DraftModelInputs) -> bool:
        # What refresh found on the host no longer matches what the stack asks for: upload again
        # (local) or stop with the mismatch (host).
        wanted = news.local_digest or news.sha256
        return bool(wanted) and outputs.digest != wanted

    def read_typed(self, inputs: DraftModelInputs, outputs: DraftModelOutputs) -> DraftModelOutputs | None:
        found = artifacts.measure(inputs.connection, inputs.path_on_host, inputs.timeout_s)
        # Gone or emptied on the host: refresh drops it and the next up uploads or checks again.
        return None if found is None or found.files == 0 else _outputs(found)

    # Delete leaves the files on purpose: other stacks on the same host read the same draft
    # model, and it is gigabytes to upload again.


DraftModelArgs = args_for(DraftModelInputs)
"""`DraftModel`'s arguments: the fields of `DraftModelInputs`, each a value or an Output of one;
`draft_model_args` derives them from what a stack declares."""


def draft_model_args(
    connection: pulumi.Input[Any],
    source: Source,
    path_on_host: str,
    local_path: str | None = None,
    sha256: str | None = None,
    sha256_manifest: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Args[DraftModelInputs]:
    """The draft model a stack declares, with a local folder hashed here: a missing or empty one
    fails the preview, and the digest of new content is known before it is uploaded. SpecError for
    a declaration that cannot be deployed."""
    _validate(source, local_path, path_on_host, sha256, sha256_manifest)
    return DraftModelArgs(
        connection=connection,
        source=source,
        local_path=str(Path(local_path).resolve()) if local_path else None,
        local_digest=local_tree_digest(local_path).digest if source == "local" and local_path else None,
        path_on_host=path_on_host,
        sha256=sha256,
        sha256_manifest=dict(sha256_manifest) if sha256_manifest else None,
        timeout_s=timeout_s,
    )


class DraftModel(TypedResource[DraftModelInputs, DraftModelOutputs], module="sglang", name="DraftModel"):
    """The EAGLE-3 draft model's folder on the GPU host, verified by its sha256 tree digest; its
    outputs are `DraftModelOutputs`.

    ``source="local"`` uploads ``local_path`` from this machine; the folder on the host then
    holds exactly those files (a new version replaces it whole). ``source="host"`` uses the
    folder already at ``path_on_host``. Either way the digest is computed on the host; a missing
    or empty folder, a digest other than ``sha256`` or a file that differs from
    ``sha256_manifest`` is an ArtifactError before any server starts.

    New local content updates the resource and changes ``digest``, which the server takes as an
    input so that it is replaced. A refresh hashes the folder again, so files changed or removed
    on the host show up. Destroying it leaves the files: other stacks on the host may read them.
    """

    def __init__(
        self, name: str, args: Args[DraftModelInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        # The digest is known before the upload, so a server that takes it as an input shows its
        # replacement in the preview.
        known = {"digest": args.get(lambda i: i.local_digest) or args.get(lambda i: i.sha256)}
        super().__init__(DraftModelProvider(), name, args, opts, known=known)
