"""Starting a local cluster: the control plane, the node (containerd and a kubelet in a mount
namespace of their own), the node's GPUs, and optionally the LeaderWorkerSet controller."""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from toolchain.local_cluster import control_plane, lws, node
from toolchain.local_cluster.api import Api
from toolchain.local_cluster.cgroups import CgroupTree
from toolchain.local_cluster.cluster import CONTEXT, Cluster, process_identity, stop_orphans
from toolchain.local_cluster.control_plane import Credentials, Ports
from toolchain.local_cluster.errors import ClusterError
from toolchain.local_cluster.gpus import GPU_RESOURCE, gpu_labels
from toolchain.local_cluster.kubeconfig import write_kubeconfig
from toolchain.local_cluster.pki import Authority
from toolchain.local_cluster.processes import Program, start, wait_until
from toolchain.local_cluster.programs import find_programs

PAUSE_IMAGE = "sglang-stacks.local/pause"
TEMPORARY_PREFIX = "sglang-stacks-kube-"
API_SERVER_NAMES = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]


def pick_port() -> int:
    """A free TCP port of 127.0.0.1 below the kernel's ephemeral range (where outgoing connections
    would take a port before the server that was given it starts)."""
    low = 10000
    try:
        high = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        high = 32768
    for _ in range(1000):
        port = random.randrange(low, high)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"No free port in {low}-{high - 1} after 1000 tries.")


@contextlib.contextmanager
def running_cluster(
    folder: Path | None = None, *, free_port: Callable[[], int] = pick_port, **options: object
) -> Iterator[Cluster]:
    """A started cluster (see ``start_cluster``), stopped after the block, nothing left behind."""
    cluster = start_cluster(folder, free_port=free_port, **options)  # type: ignore[arg-type]
    try:
        yield cluster
    finally:
        cluster.stop()


def start_cluster(
    folder: Path | None = None,
    *,
    free_port: Callable[[], int] = pick_port,
    profile: str | None = None,
    leader_worker_set: bool = True,
    images: bool = True,
    timeout_s: float = 300.0,
) -> Cluster:
    """Start a cluster with its state in ``folder`` and return it
    once its node is Ready with the GPUs of the emulator ``profile`` (the shipped default if None)
    and, with ``leader_worker_set``, the LeaderWorkerSet controller serves; with ``images``, the
    emulator's image imported (``cluster.emulator_image``). A failed start stops what it started
    and raises a ClusterError naming the program and its last log lines.

    Without ``folder``, the cluster is this process's: it lives in a new temporary folder, and
    if this process dies without stopping it (a killed test session), the next such start does."""
    programs = find_programs()
    owner = None
    if folder is None:
        stop_orphans(Path(tempfile.gettempdir()), TEMPORARY_PREFIX)
        folder, owner = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX)), process_identity(os.getpid())
    folder.mkdir(parents=True, exist_ok=True)
    unique = secrets.token_hex(4)
    ports = Ports(*(free_port() for _ in range(len(Ports.__dataclass_fields__))))
    cluster = Cluster(
        folder, ports, CgroupTree(f"sglang-stacks-kube-{unique}"), f"sgk{unique}", programs, owner=owner
    )
    cluster.save()
    try:
        _start(cluster, profile, leader_worker_set, images, time.monotonic() + timeout_s)
    except BaseException:
        cluster.stop(remove_folder=False)
        raise
    return cluster


def _start(
    cluster: Cluster, profile: str | None, leader_worker_set: bool, images: bool, deadline: float
) -> None:
    folder, ports, programs = cluster.folder, cluster.ports, cluster.programs
    pki = Authority(folder / "pki")
    credentials = _credentials(pki, folder, cluster.server)
    files = node.NodeFiles(folder)
    cluster.cgroup.create()

    def launch(name: str, argv: list[str], **extra: Any) -> Program:
        program = start(name, argv, folder=folder, cgroup_procs=cluster.cgroup.daemons_procs(), **extra)
        cluster.running.append(program)
        return program

    def left() -> float:
        return max(deadline - time.monotonic(), 1.0)

    etcd = launch("etcd", control_plane.etcd(programs, folder, ports))
    namespace = _mount_namespace(launch, files)
    node.write_containerd_config(files, programs, cluster.bridge, f"{PAUSE_IMAGE}:{programs.pause_tag}")
    env = {**os.environ, "PATH": f"{programs.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    in_node = {"env": env, "mount_namespace_of": namespace}
    containerd = launch("containerd", node.containerd_argv(programs, files), **in_node)
    wait_until("etcd answering", lambda: _etcd_healthy(ports), watch=[etcd], timeout_s=left())
    api_server = launch("kube-apiserver", control_plane.api_server(programs, folder, ports, credentials))
    wait_until("containerd serving", files.containerd_socket.exists, watch=[containerd], timeout_s=left())
    cluster.import_image(programs.pause_image, PAUSE_IMAGE)
    # The emulator's image is built (unless cached) and imported while the control plane starts.
    importing = ThreadPoolExecutor(max_workers=1)
    imported = importing.submit(cluster.import_emulator_image) if images else None
    admin = pki.issue("admin", "sglang-stacks-admin", "system:masters")
    api = Api(cluster.server, credentials.ca, admin)
    try:
        wait_until("the API server ready", api.ready, watch=[etcd, api_server], timeout_s=left())
        write_kubeconfig(
            cluster.kubeconfig,
            server=cluster.server,
            ca=credentials.ca.cert,
            client=admin,
            context=CONTEXT,
            inline=False,
        )
        watched = [etcd, api_server, containerd]
        if leader_worker_set:
            lws.apply_crd(api, programs)
        for name, argv in (
            (
                "kube-controller-manager",
                control_plane.controller_manager(programs, folder, ports, credentials),
            ),
            ("kube-scheduler", control_plane.scheduler(programs, folder, ports, credentials)),
        ):
            watched.append(launch(name, argv))
        serving = pki.issue("kubelet", node.NODE_NAME, ips=["127.0.0.1"], dns=["localhost"])
        node.write_kubelet_config(files, ports, credentials.ca, serving, cluster.cgroup.path)
        identity = pki.issue("node", f"system:node:{node.NODE_NAME}", "system:nodes")
        write_kubeconfig(
            files.kubelet_kubeconfig,
            server=cluster.server,
            ca=credentials.ca.cert,
            client=identity,
            context="node",
        )
        watched.append(launch("kubelet", node.kubelet_argv(programs, files), **in_node))
        _advertise_gpus(api, profile, watched, left())
        if leader_worker_set:
            watched.append(lws.start(cluster, api, pki, launch, watched, left()))
        # The service-account controller's first work: until it is done no pod can be created.
        default_account = "/api/v1/namespaces/default/serviceaccounts/default"
        wait_until(
            "the default service account",
            lambda: api.get(default_account) is not None,
            watch=watched,
            timeout_s=left(),
        )
        if imported is not None:
            imported.result(timeout=left())
    finally:
        api.close()
        importing.shutdown(wait=False)


def _credentials(pki: Authority, folder: Path, server: str) -> Credentials:
    ca = pki.ca
    api_server = pki.issue(
        "api-server", "kube-apiserver", ips=["127.0.0.1", "10.96.0.1"], dns=API_SERVER_NAMES
    )
    kubelet_client = pki.issue("api-server-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
    kubeconfigs = folder / "kubeconfigs"
    kubeconfigs.mkdir(exist_ok=True)
    controller_manager = write_kubeconfig(
        kubeconfigs / "controller-manager",
        server=server,
        ca=ca.cert,
        client=pki.issue("controller-manager", "system:kube-controller-manager"),
        context="local",
    )
    scheduler = write_kubeconfig(
        kubeconfigs / "scheduler",
        server=server,
        ca=ca.cert,
        client=pki.issue("scheduler", "system:kube-scheduler"),
        context="local",
    )
    return Credentials(
        ca, api_server, kubelet_client, pki.signing_key("service-accounts"), controller_manager, scheduler
    )


def _mount_namespace(launch: Callable[..., Program], files: node.NodeFiles) -> int:
    """Start the process that holds the node's mount namespace and set up its mounts there."""
    holder = launch("mount-namespace", ["unshare", "--mount", "--propagation=private", "sleep", "infinity"])
    own = os.readlink("/proc/self/ns/mnt")
    pid = holder.process.pid

    def unshared() -> bool:
        try:
            return (
                os.readlink(f"/proc/{pid}/ns/mnt") != own
                and Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
            )
        except OSError:
            return False

    wait_until("the node's mount namespace", unshared, watch=[holder], timeout_s=30)
    result = subprocess.run(
        ["nsenter", f"--target={pid}", "--mount", "--", "sh", "-ec", "; ".join(node.namespace_mounts(files))],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ClusterError(f"Setting up the node's mount namespace failed: {result.stderr.strip()}")
    return pid


def _etcd_healthy(ports: Ports) -> bool:
    try:
        health = httpx.get(f"http://127.0.0.1:{ports.etcd_client}/health", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return False
    return isinstance(health, dict) and health.get("health") == "true"


def _advertise_gpus(api: Api, profile: str | None, watched: list[Program], timeout_s: float) -> None:
    """Once the node registered: label it as GPU feature discovery would and advertise its GPUs as
    a device plugin would (the extended resource in the node's status), then wait for it Ready."""
    from sglang_emulator.profile_loading import load_profile

    host = load_profile(profile).host
    path = f"/api/v1/nodes/{node.NODE_NAME}"
    wait_until("the node registered", lambda: api.get(path) is not None, watch=watched, timeout_s=timeout_s)
    api.patch(path, {"metadata": {"labels": gpu_labels(host)}})
    count = str(host.gpu_count)
    api.patch(
        f"{path}/status",
        {"status": {"capacity": {GPU_RESOURCE: count}, "allocatable": {GPU_RESOURCE: count}}},
    )

    def ready() -> bool:
        found = api.get(path) or {}
        conditions = {c["type"]: c["status"] for c in found.get("status", {}).get("conditions", [])}
        return (
            conditions.get("Ready") == "True"
            and found["status"].get("allocatable", {}).get(GPU_RESOURCE) == count
        )

    wait_until("the node Ready with its GPUs", ready, watch=watched, timeout_s=timeout_s)
