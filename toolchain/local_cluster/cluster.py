"""A running local cluster: how to reach it (kubeconfig, context, kubectl, containerd's ``ctr``),
its logs, and stopping it so that nothing it started is left: no process, cgroup, mount, network
interface or file."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from toolchain.local_cluster.cgroups import CgroupTree
from toolchain.local_cluster.control_plane import Ports
from toolchain.local_cluster.errors import ClusterError
from toolchain.local_cluster.node import IMAGE_NAMESPACE, NODE_NAME, NodeFiles
from toolchain.local_cluster.processes import Program
from toolchain.local_cluster.programs import Programs, find_programs

CONTEXT = "sglang-stacks-local"
"""The kubeconfig context (and cluster and user) name of a local cluster."""
STATE_FILE = "cluster.json"


@dataclass
class Cluster:
    """A local cluster: its folder holds its state, logs and kubeconfig."""

    folder: Path
    ports: Ports
    cgroup: CgroupTree
    bridge: str
    """The cluster's own network bridge (pods that do not use the host's network)."""
    programs: Programs
    running: list[Program] = field(default_factory=list)
    """The programs this process started (empty in a process that loaded the cluster)."""
    emulator_image: str | None = None
    """The emulator image's reference, once ``import_emulator_image`` imported it."""
    owner: str | None = None
    """For a cluster that lives as long as the process that started it (a test session's): that
    process (``process_identity``). Once it is gone, the next such start stops the cluster."""

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (context ``CONTEXT``, current)."""
        return self.folder / "kubeconfig"

    @property
    def context(self) -> str:
        return CONTEXT

    @property
    def server(self) -> str:
        """The API server's URL."""
        return f"https://127.0.0.1:{self.ports.api_server}"

    @property
    def node_name(self) -> str:
        return NODE_NAME

    @property
    def containerd_socket(self) -> Path:
        return NodeFiles(self.folder).containerd_socket

    def env(self) -> dict[str, str]:
        """What a kubectl or Pulumi program needs to reach the cluster (``KUBECONFIG``)."""
        return {"KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, input: str | None = None, timeout_s: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the cluster's kubectl with its kubeconfig; a ClusterError with its output when it
        fails and ``check``."""
        argv = [
            self.programs.bin("kubectl"),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.folder / 'kubectl'}",
        ]
        return self._run([*argv, *args], input, timeout_s, check, shown=len(argv))

    def ctr(
        self, *args: str, timeout_s: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run containerd's ``ctr`` against the node's containerd, in Kubernetes' namespace."""
        argv = [
            self.programs.bin("ctr"),
            f"--address={self.containerd_socket}",
            f"--namespace={IMAGE_NAMESPACE}",
        ]
        return self._run([*argv, *args], None, timeout_s, check, shown=len(argv))

    def import_image(self, tarball: Path, name: str) -> None:
        """Import an OCI image tarball whose one image is tagged ``<tag>`` as ``name:<tag>``."""
        self.ctr("images", "import", f"--base-name={name}", str(tarball))

    def import_emulator_image(self) -> str:
        """Build (unless cached) and import the emulator's image; its reference, also tagged
        ``LOCAL_TAG`` (a name that stays put for a stack file; IfNotPresent, never pulled)."""
        from toolchain.local_cluster.images import LOCAL_TAG, emulator_image

        image = emulator_image(self.programs)
        self.import_image(image.tarball, image.name)
        self.ctr("images", "tag", "--force", image.ref, f"{image.name}:{LOCAL_TAG}")
        self.emulator_image = image.ref
        return image.ref

    def images(self) -> list[str]:
        """The names of the images in the node's containerd."""
        return self.ctr("images", "list", "--quiet").stdout.split()

    def log(self, program: str) -> str:
        """What one of the cluster's programs printed (``kube-apiserver``, ``kubelet``, ...)."""
        path = self.folder / "logs" / f"{program}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def save(self) -> None:
        """Write what another process needs to reach or stop the cluster."""
        state = {
            "ports": asdict(self.ports),
            "cgroup": self.cgroup.name,
            "bridge": self.bridge,
            "owner": self.owner,
        }
        (self.folder / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, folder: Path) -> Cluster:
        """The cluster whose folder is ``folder`` (started by another process)."""
        try:
            state = json.loads((folder / STATE_FILE).read_text())
        except FileNotFoundError:
            raise ClusterError(f"{folder} holds no local cluster (no {STATE_FILE}).") from None
        ports, cgroup = Ports(**state["ports"]), CgroupTree(state["cgroup"])
        return cls(folder, ports, cgroup, state["bridge"], find_programs(), owner=state.get("owner"))

    def stop(self, *, remove_folder: bool = True) -> None:
        """Kill everything the cluster started (its cgroup's processes: the control plane, the node,
        the pods), then remove its cgroups, its bridge, any mount left under its folder, and the
        folder itself unless ``remove_folder`` is false."""
        self.cgroup.kill()
        for program in self.running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                program.process.wait(timeout=10)
        self.running.clear()
        self.cgroup.remove()
        if Path("/sys/class/net", self.bridge).exists():
            subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, check=False)
        for mount in reversed(mounts_under(self.folder)):
            subprocess.run(["umount", "--lazy", mount], capture_output=True, check=False)
        if remove_folder:
            # rm rather than shutil.rmtree: the unpacked images are many small files, and it is faster.
            subprocess.run(
                ["rm", "-rf", "--one-file-system", str(self.folder)], capture_output=True, check=False
            )

    def leftovers(self) -> list[str]:
        """What of the cluster is still there: processes, cgroups, its bridge, mounts, its folder."""
        found = [f"process {pid}" for pid in sorted(self.cgroup.pids())]
        found += [f"cgroup {folder}" for folder in self.cgroup.folders() if folder.exists()]
        found += [f"network interface {self.bridge}"] if Path("/sys/class/net", self.bridge).exists() else []
        found += [f"mount {point}" for point in mounts_under(self.folder)]
        found += [f"folder {self.folder}"] if self.folder.exists() else []
        return found

    def _run(
        self, argv: list[str], input: str | None, timeout_s: float, check: bool, shown: int
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if check and result.returncode != 0:
            raise ClusterError(
                f"{os.path.basename(argv[0])} {' '.join(argv[shown:])} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result


def process_identity(pid: int) -> str | None:
    """``<pid>:<start time>`` of a running process (a pid alone may be reused); None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the start time is field 22.
    return f"{pid}:{stat.rpartition(')')[2].split()[19]}"


def stop_orphans(parent: Path, prefix: str) -> list[Path]:
    """Stop the clusters in ``parent``'s ``<prefix>*`` folders whose owner is gone (a test session
    that was killed); their folders."""
    stopped = []
    for state in sorted(parent.glob(f"{prefix}*/{STATE_FILE}")):
        try:
            owner = json.loads(state.read_text()).get("owner")
        except (OSError, ValueError):
            continue
        if owner and process_identity(int(owner.split(":")[0])) != owner:
            Cluster.load(state.parent).stop()
            stopped.append(state.parent)
    return stopped


def mounts_under(folder: Path) -> list[str]:
    """The mount points of this mount namespace inside ``folder``."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(folder) or point.startswith(f"{folder}/"):
            found.append(point)
    return found
