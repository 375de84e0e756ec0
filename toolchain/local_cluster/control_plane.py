"""The control plane's command lines: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, every one listening on 127.0.0.1 only, each on its own port."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolchain.local_cluster.pki import KeyPair
from toolchain.local_cluster.programs import Programs

SERVICE_CIDR = "10.96.0.0/24"
"""Services get cluster IPs from here; nothing routes them (no kube-proxy): tests reach pods on
the host's network at 127.0.0.1 instead."""


@dataclass(frozen=True)
class Ports:
    """The TCP ports of 127.0.0.1 the cluster listens on."""

    etcd_client: int
    etcd_peer: int
    api_server: int
    controller_manager: int
    scheduler: int
    kubelet: int
    lws_webhook: int
    lws_health: int


@dataclass(frozen=True)
class Credentials:
    """The certificates and kubeconfigs the control plane's programs use."""

    ca: KeyPair
    api_server: KeyPair
    kubelet_client: KeyPair
    """The API server's identity towards kubelets (logs, exec)."""
    service_accounts: KeyPair
    controller_manager_kubeconfig: Path
    scheduler_kubeconfig: Path


def etcd(programs: Programs, folder: Path, ports: Ports) -> list[str]:
    client, peer = f"http://127.0.0.1:{ports.etcd_client}", f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        programs.bin("etcd"),
        "--name=local",
        f"--data-dir={folder / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=local={peer}",
        # A test cluster's data dies with it: durability would only cost time on a shared disk.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def api_server(programs: Programs, folder: Path, ports: Ports, credentials: Credentials) -> list[str]:
    return [
        programs.bin("kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.api_server}",
        f"--cert-dir={folder / 'api-server'}",
        f"--tls-cert-file={credentials.api_server.cert}",
        f"--tls-private-key-file={credentials.api_server.key}",
        f"--client-ca-file={credentials.ca.cert}",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={credentials.service_accounts.cert}",
        f"--service-account-signing-key-file={credentials.service_accounts.key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--kubelet-client-certificate={credentials.kubelet_client.cert}",
        f"--kubelet-client-key={credentials.kubelet_client.key}",
        f"--kubelet-certificate-authority={credentials.ca.cert}",
        "--kubelet-preferred-address-types=InternalIP",
        # The `kubernetes` Service's endpoint would be the advertised 127.0.0.1, which Endpoints refuse.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
    ]


def controller_manager(programs: Programs, folder: Path, ports: Ports, credentials: Credentials) -> list[str]:
    kubeconfig = str(credentials.controller_manager_kubeconfig)
    return [
        programs.bin("kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--cert-dir={folder / 'controller-manager'}",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={credentials.service_accounts.key}",
        f"--root-ca-file={credentials.ca.cert}",
        f"--cluster-signing-cert-file={credentials.ca.cert}",
        f"--cluster-signing-key-file={credentials.ca.key}",
        "--profiling=false",
    ]


def scheduler(programs: Programs, folder: Path, ports: Ports, credentials: Credentials) -> list[str]:
    kubeconfig = str(credentials.scheduler_kubeconfig)
    return [
        programs.bin("kube-scheduler"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        f"--cert-dir={folder / 'scheduler'}",
        "--leader-elect=false",
        "--profiling=false",
    ]
