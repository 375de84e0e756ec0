"""The node: containerd (with runc and the CNI plugins) and a kubelet, in a mount namespace of
their own, on 127.0.0.1.

The mount namespace holds every mount the node makes (image layers, volumes, network namespaces):
it ends with the node's last process, so a stopped cluster leaves no mount behind. It also hides
the host's kernel settings the kubelet would otherwise change on start (overcommit, panic on oops:
settings of the whole machine, which a test cluster has no business changing) behind private
copies, which the kubelet then changes instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from toolchain.local_cluster.control_plane import Ports
from toolchain.local_cluster.errors import ClusterError
from toolchain.local_cluster.pki import KeyPair
from toolchain.local_cluster.programs import CNI_PLUGINS, Programs

NODE_NAME = "127.0.0.1"
"""The kubelet refuses a loopback ``--node-ip``, but takes the node's address from a name that is an
IP: so the node is named by its address, and its InternalIP is 127.0.0.1."""
POD_SUBNET = "10.244.0.0/24"
"""Pods that do not use the host's network get an address here, on a bridge of the cluster's own
that has no address on the host: such pods reach each other, and nothing else."""
IMAGE_NAMESPACE = "k8s.io"
"""containerd's namespace for the images and containers of Kubernetes (CRI)."""
KERNEL_SETTINGS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
"""What the kubelet sets on start (pkg/kubelet/cm, setupKernelTunables)."""
HOST_FOLDERS = ("/run", "/var/lib", "/var/log")
"""Where the node's programs write outside their configured folders, wherever they are told: the
shims' sockets (/run/containerd/s), the CNI plugins' cache (/var/lib/cni), the kubelet's links to
container logs (/var/log/containers). Each is an overlay in the node's mount namespace whose
writable layer is in the cluster's folder: the node reads the host's files and writes only there."""
_CAP_SYS_RESOURCE = 24


@dataclass(frozen=True)
class NodeFiles:
    """Where the node's parts keep their state, in the cluster's folder."""

    folder: Path

    @property
    def containerd_config(self) -> Path:
        return self.folder / "containerd" / "config.toml"

    @property
    def containerd_root(self) -> Path:
        return self.folder / "containerd" / "root"

    @property
    def containerd_socket(self) -> Path:
        return self.folder / "containerd" / "containerd.sock"

    @property
    def cni_config(self) -> Path:
        return self.folder / "cni" / "net.d"

    @property
    def kubelet_config(self) -> Path:
        return self.folder / "kubelet" / "config.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.folder / "kubelet" / "kubeconfig"

    @property
    def kubelet_root(self) -> Path:
        return self.folder / "kubelet" / "root"

    @property
    def kernel_settings(self) -> Path:
        return self.folder / "kernel-settings"

    @property
    def host_layers(self) -> Path:
        return self.folder / "host"


def mask_kernel_settings(files: NodeFiles) -> list[tuple[Path, Path]]:
    """Copies of the settings the kubelet sets, and the /proc/sys file each one hides (bind mounts
    to make in the node's mount namespace)."""
    files.kernel_settings.mkdir(parents=True, exist_ok=True)
    masks = []
    for setting in KERNEL_SETTINGS:
        real = Path("/proc/sys") / setting
        if real.exists():
            copy = files.kernel_settings / setting.replace("/", ".")
            copy.write_text(real.read_text())
            masks.append((copy, real))
    return masks


def namespace_mounts(files: NodeFiles) -> list[str]:
    """The mount commands that set up the node's mount namespace: the kernel settings hidden
    behind copies, the host folders behind overlays (see ``HOST_FOLDERS``), and containerd's
    images and containers' layers in memory (a tmpfs that ends with the namespace: removing
    their thousands of files from the disk took longer than the rest of a stop)."""
    for folder in HOST_FOLDERS:
        if files.folder.resolve().is_relative_to(folder):
            raise ClusterError(
                f"The cluster's folder {files.folder} is inside {folder}; choose one outside it."
            )
    commands = [f"mount --bind {copy} {real}" for copy, real in mask_kernel_settings(files)]
    for folder in HOST_FOLDERS:
        layer = files.host_layers / folder.strip("/").replace("/", "-")
        (layer / "upper").mkdir(parents=True, exist_ok=True)
        (layer / "work").mkdir(exist_ok=True)
        options = f"lowerdir={folder},upperdir={layer / 'upper'},workdir={layer / 'work'}"
        commands.append(f"mount -t overlay overlay -o {options} {folder}")
    files.containerd_root.mkdir(parents=True, exist_ok=True)
    commands.append(f"mount -t tmpfs -o mode=0711 tmpfs {files.containerd_root}")
    return commands


def write_containerd_config(files: NodeFiles, programs: Programs, bridge: str, pause_image: str) -> None:
    """containerd's configuration: its state in the folder, runc from Debian, the sandbox image
    this cluster imported, the CNI plugins from Debian with the cluster's own bridge network."""
    base = files.folder / "containerd"
    base.mkdir(parents=True, exist_ok=True)
    images, runtime = '[plugins."io.containerd.cri.v1.images"]', '[plugins."io.containerd.cri.v1.runtime"]'
    runc = '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]'
    files.containerd_config.write_text(
        f"""version = 3
root = "{files.containerd_root}"
state = "{base / "state"}"

[grpc]
  address = "{files.containerd_socket}"

[ttrpc]
  address = "{files.containerd_socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"

# NRI's socket is one per machine; a test node does without plugins.
[plugins."io.containerd.nri.v1.nri"]
  disable = true

{images}
  snapshotter = "overlayfs"

{images[:-1]}.pinned_images]
  sandbox = "{pause_image}"

{images[:-1]}.registry]
  config_path = ""

{runtime}
  enable_cdi = false
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = {"false" if _may_lower_oom_scores() else "true"}

{runtime[:-1]}.cni]
  bin_dirs = ["{CNI_PLUGINS}"]
  conf_dir = "{files.cni_config}"

{runc}
  runtime_type = "io.containerd.runc.v2"

{runc[:-1]}.options]
  BinaryName = "{programs.runc}"
  Root = "{base / "runc"}"
  SystemdCgroup = false
"""
    )
    files.cni_config.mkdir(parents=True, exist_ok=True)
    network = {
        "cniVersion": "1.0.0",
        "name": bridge,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": False,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "dataDir": str(files.folder / "cni" / "ipam"),
                },
            }
        ],
    }
    (files.cni_config / f"10-{bridge}.conflist").write_text(json.dumps(network, indent=2))


def _may_lower_oom_scores() -> bool:
    """Whether this process has CAP_SYS_RESOURCE, without which the kernel refuses an OOM score
    below the current one (a pod's sandbox asks for -998): containerd then keeps each container's
    at least at its own, as it does when it runs without privileges."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    return False


def write_kubelet_config(
    files: NodeFiles, ports: Ports, ca: KeyPair, serving: KeyPair, cgroup_root: str
) -> None:
    """The kubelet's configuration: it serves on 127.0.0.1 with a certificate of the cluster's CA,
    lets in the API server's client certificate, runs pods under the cluster's cgroup, and
    neither evicts nor garbage-collects images on a shared disk (a test node's images cannot be
    pulled again: no registry is reachable)."""
    files.kubelet_root.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "tlsCertFile": str(serving.cert),
        "tlsPrivateKeyFile": str(serving.key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca.cert)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{files.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        # This machine may have cgroup v1 only (the kubelet refuses it by default since 1.35).
        "failCgroupV1": False,
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "podLogsDir": str(files.folder / "pod-logs"),
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
    }
    files.kubelet_config.write_text(yaml.safe_dump(config, sort_keys=False))


def containerd_argv(programs: Programs, files: NodeFiles) -> list[str]:
    return [programs.bin("containerd"), f"--config={files.containerd_config}", "--log-level=info"]


def kubelet_argv(programs: Programs, files: NodeFiles) -> list[str]:
    return [
        programs.bin("kubelet"),
        f"--config={files.kubelet_config}",
        f"--kubeconfig={files.kubelet_kubeconfig}",
        f"--root-dir={files.kubelet_root}",
        f"--hostname-override={NODE_NAME}",
        f"--cert-dir={files.folder / 'kubelet' / 'pki'}",
        "--v=1",
    ]
