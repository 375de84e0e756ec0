"""The cluster's cgroup: one subtree, named for the cluster, in every cgroup hierarchy.

The kubelet puts its pods under it (its ``cgroupRoot``, which must exist before it starts), and the
cluster's own programs (etcd, the control plane, containerd and its shims, the kubelet) start in
its ``daemons`` child of the tracking hierarchy (cgroup2's, else v1's ``pids``). Every process the
cluster made is then in the subtree, whatever re-parented it: stopping the cluster kills the
subtree and removes it, and nothing it started outlives it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from toolchain.local_cluster.errors import ClusterError

DAEMONS = "daemons"


def _mounts() -> list[tuple[str, Path, set[str]]]:
    """(filesystem type, mount point, options) of each cgroup hierarchy mounted here."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, kind, options, *_ = line.split()
        if kind in ("cgroup", "cgroup2"):
            found.append((kind, Path(point), set(options.split(","))))
    return found


@dataclass(frozen=True)
class CgroupTree:
    """The subtree ``/<name>`` in each hierarchy."""

    name: str

    @property
    def path(self) -> str:
        """As the kubelet's ``cgroupRoot``."""
        return f"/{self.name}"

    def folders(self) -> list[Path]:
        """The subtree's root in every hierarchy."""
        return [point / self.name for _, point, _ in _mounts()]

    def tracking(self) -> Path:
        """The subtree in the hierarchy that tracks the cluster's processes."""
        mounts = _mounts()
        for kind, point, _ in mounts:
            if kind == "cgroup2":
                return point / self.name
        for _, point, options in mounts:
            if "pids" in options:
                return point / self.name
        raise ClusterError("Neither a cgroup2 hierarchy nor cgroup v1's pids controller is mounted here.")

    def daemons_procs(self) -> Path:
        """The ``cgroup.procs`` file a cluster program writes its pid into before it starts."""
        return self.tracking() / DAEMONS / "cgroup.procs"

    def create(self) -> None:
        """Make the subtree in every hierarchy (v1's cpuset needs its CPUs and memory nodes copied
        from the parent before a process may join; cgroup2 needs its controllers enabled)."""
        for kind, point, _ in _mounts():
            folder = point / self.name
            folder.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if kind == "cgroup" and (point / name).exists():
                    (folder / name).write_text((point / name).read_text())
            if kind == "cgroup2":
                wanted = (point / "cgroup.subtree_control").read_text().split()
                if wanted:
                    (folder / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        (self.tracking() / DAEMONS).mkdir(exist_ok=True)

    def pids(self) -> set[int]:
        """Every process in the subtree."""
        found: set[int] = set()
        root = self.tracking()
        if not root.exists():
            return found
        for folder, _, _ in os.walk(root):
            with contextlib.suppress(FileNotFoundError):
                found.update(int(pid) for pid in (Path(folder) / "cgroup.procs").read_text().split())
        return found

    def kill(self, timeout_s: float = 30.0) -> None:
        """SIGKILL every process in the subtree, again until none is left (a process may fork
        while it is being killed)."""
        deadline = time.monotonic() + timeout_s
        while pids := self.pids():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise ClusterError(f"Processes {sorted(pids)} of cgroup {self.path} survived SIGKILL.")
            time.sleep(0.05)

    def remove(self, timeout_s: float = 10.0) -> None:
        """Remove the (empty) subtree from every hierarchy, deepest folders first. A cgroup whose
        last process just died may still be busy for a moment: that is retried."""
        deadline = time.monotonic() + timeout_s
        for root in self.folders():
            if not root.exists():
                continue
            for folder, _, _ in sorted(os.walk(root), key=lambda entry: -len(Path(entry[0]).parts)):
                while True:
                    try:
                        os.rmdir(folder)
                        break
                    except FileNotFoundError:
                        break
                    except OSError as error:
                        if error.errno != errno.EBUSY or time.monotonic() > deadline:
                            raise ClusterError(f"Cannot remove cgroup {folder}: {error}.") from error
                        time.sleep(0.05)
