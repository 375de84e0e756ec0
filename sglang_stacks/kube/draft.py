"""The draft model on a cluster's node: its folder mounted into the server's pod, and an init
container that hashes it before SGLang starts, with the program that hashes it over SSH
(``tree_digest.sh``: symbolic links followed, paths sorted byte by byte), so one folder has one
digest whichever way it is deployed; and the error of a pod whose check failed.
"""

from __future__ import annotations

from typing import Any

import pulumi_kubernetes as k8s

from sglang_stacks.errors import ArtifactError
from sglang_stacks.hostops.programs.contract import source
from sglang_stacks.hostops.programs.tree_digest_contract import TREE_DIGEST

__all__ = [
    "DRAFT_CHECK",
    "DRAFT_VOLUME",
    "draft_check",
    "draft_failure",
    "draft_mount",
    "draft_unmounted",
    "draft_volume",
    "failed_draft_mount",
    "mounts_draft",
]

DRAFT_CHECK = "draft-model-sha256"
"""The init container's name."""
DRAFT_VOLUME = "draft-model"

_SAID = (1, 6)
"""The check's own exits, each with a sentence that says the fix: another digest (1), links out of
the folder (6). tree_digest.sh's failures keep its exits (`TreeDigestExit`: 3 to 5)."""
# $1 the folder, $2 the digest expected, $3 tree_digest.sh. Only the folder is mounted: a link out
# of it (a hub cache's snapshot links to its blobs) is broken in the pod, and would be left out of
# the listing. The listing after its first line (`present <bytes>`) is what the digest is the
# sha256 of; $(...) drops its last newline, printf puts it back.
_CHECK = r"""
broken=$(cd "$1" && find -L . -type l | LC_ALL=C sort | head -n 3 | tr '\n' ' ')
if [ -n "$broken" ]; then
    echo "the draft model at $1 has links to files outside it, which the pod does not see" \
        "(${broken% }); put the files themselves there (cp -rL), or point draftModel.path_on_host" \
        "at the folder that holds them" >&2
    exit 6
fi
listing=$(FOLDER="$1" bash -c "$3") || exit $?
got=$(printf '%s\n' "$listing" | tail -n +2 | sha256sum | cut -d' ' -f1)
[ "$got" = "$2" ] && exit 0
echo "the draft model at $1 hashes to $got, not $2:" \
    "copy the right checkpoint there, or fix draftModel.sha256" >&2
exit 1
"""


def draft_volume(path: str) -> k8s.core.v1.VolumeArgs:
    """The node's folder ``path`` as the pod's volume (it must be there: the pod does not start
    without it)."""
    folder = k8s.core.v1.HostPathVolumeSourceArgs(path=path, type="Directory")
    return k8s.core.v1.VolumeArgs(name=DRAFT_VOLUME, host_path=folder)


def draft_mount(path: str) -> k8s.core.v1.VolumeMountArgs:
    """The draft model's folder, read-only at the path it has on the node."""
    return k8s.core.v1.VolumeMountArgs(name=DRAFT_VOLUME, mount_path=path, read_only=True)


def draft_check(image: str, pull_policy: str, path: str, sha256: str) -> k8s.core.v1.ContainerArgs:
    """The init container that refuses to start the server when the draft model's folder on the node
    does not hash to ``sha256`` (the image needs bash and GNU findutils, as an SGLang image has)."""
    return k8s.core.v1.ContainerArgs(
        name=DRAFT_CHECK,
        image=image,
        image_pull_policy=pull_policy,
        command=["bash", "-c", _CHECK, DRAFT_CHECK, path, sha256, source(TREE_DIGEST.file)],
        volume_mounts=[draft_mount(path)],
    )


def draft_failure(what: str, pod: Any, exit_code: int, log: str) -> ArtifactError:
    """The error of ``pod`` whose draft model check ended with ``exit_code``, having printed ``log``."""
    node = pod.spec.node_name or "its node"
    said = log.strip() or "(its log is empty)"
    if exit_code in _SAID:
        return ArtifactError(f"{what} did not start on node {node}: {said}.")
    return ArtifactError(
        f"{what} did not start on node {node}: hashing its draft model failed (exit {exit_code}): "
        f"{said} Fix the unreadable files or broken links it names, then run `pulumi up` again."
    )


def mounts_draft(pod: Any) -> bool:
    """Whether ``pod`` mounts a draft model's folder."""
    return any(volume.name == DRAFT_VOLUME for volume in pod.spec.volumes or [])


def failed_draft_mount(event: Any) -> bool:
    """Whether a pod's ``FailedMount`` event is its draft model's volume's (the kubelet names the
    volume in its message; other volumes' mounts, such as the service account's, may fail for a moment
    while a pod starts)."""
    return f'volume "{DRAFT_VOLUME}"' in (event.message or "")


def draft_unmounted(what: str, pod: Any, kubelet_says: str) -> ArtifactError:
    """The error of ``pod`` whose node has no draft model folder to mount (the kubelet's message)."""
    path = next(v.host_path.path for v in pod.spec.volumes if v.name == DRAFT_VOLUME)
    node = pod.spec.node_name or "its node"
    return ArtifactError(
        f"{what} cannot start on node {node}: the draft model's folder {path} is not there (the kubelet "
        f'says "{kubelet_says.strip()}"). Put the draft model at draftModel.path_on_host on every node '
        "the server's pods may run on, or fix that path; then run `pulumi up` again."
    )
