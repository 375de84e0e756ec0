"""Where the local cluster's programs are: what scripts/ensure-k8s.sh built and linked into
``.venv/kubernetes``, and what Debian installed (runc, the CNI plugins, umoci)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from toolchain.local_cluster.errors import ClusterError

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ROOT / ".venv" / "kubernetes"
INSTALL_HINT = (
    "The local Kubernetes cluster's programs are not installed here; run scripts/ensure-k8s.sh once "
    "(it builds them, which takes long the first time), then try again."
)
ROOT_HINT = (
    "The local Kubernetes cluster runs a kubelet and containerd, which need root (cgroups, mounts, "
    "network namespaces); run this as root."
)
CNI_PLUGINS = Path("/usr/lib/cni")
"""Debian's containernetworking-plugins."""
_PROGRAMS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "lws-controller",
)


@dataclass(frozen=True)
class Programs:
    """The programs and files a cluster is made of."""

    folder: Path
    """``.venv/kubernetes``: ``bin/``, ``pause/``, ``lws/``, ``debian-python3/``."""
    runc: Path
    umoci: Path

    def bin(self, name: str) -> str:
        """The path of one of the built programs (``kube-apiserver``, ``ctr``, ...)."""
        return str(self.folder / "bin" / name)

    @property
    def bin_dir(self) -> Path:
        return self.folder / "bin"

    @property
    def pause_image(self) -> Path:
        """The sandbox image, an OCI image tarball."""
        return self.folder / "pause" / "image.tar"

    @property
    def pause_tag(self) -> str:
        return (self.folder / "pause" / "tag").read_text().strip()

    @property
    def lws_crd(self) -> Path:
        """The LeaderWorkerSet CRD, as its release ships it."""
        return self.folder / "lws" / "crd.yaml"

    @property
    def lws_webhooks(self) -> Path:
        """The LeaderWorkerSet controller's webhook configurations, as its release renders them."""
        return self.folder / "lws" / "webhooks.yaml"

    @property
    def debian_python(self) -> Path:
        """An OCI image layout, tag ``base``: Debian's minimal system and python3."""
        return self.folder / "debian-python3"


def find_programs() -> Programs:
    """The installed programs; a ClusterError naming the fix when something is missing."""
    if os.geteuid() != 0:
        raise ClusterError(ROOT_HINT)
    runc, umoci = shutil.which("runc"), shutil.which("umoci")
    missing = [name for name in _PROGRAMS if not os.access(INSTALLED / "bin" / name, os.X_OK)]
    if missing or runc is None or umoci is None or not (CNI_PLUGINS / "bridge").exists():
        raise ClusterError(INSTALL_HINT)
    return Programs(INSTALLED, Path(runc), Path(umoci))
