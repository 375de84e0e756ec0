"""The LeaderWorkerSet controller (sigs.k8s.io/lws), run from its Go module on the host.

Its CRD and webhook configurations are the release's own (scripts/ensure-k8s.sh copies them). In a
cluster it runs as a pod behind a Service, with certificates its internal cert rotator (or
cert-manager) makes; here it runs beside the API server, so the release's internal certificate
management is turned off, the cluster's CA issues the webhook server's certificate for 127.0.0.1,
and the webhook configurations call it there by URL instead of through a Service.
"""

from __future__ import annotations

import base64
import socket
from collections.abc import Callable
from typing import Any

import httpx
import yaml

from toolchain.local_cluster.api import Api
from toolchain.local_cluster.cluster import Cluster
from toolchain.local_cluster.kubeconfig import write_kubeconfig
from toolchain.local_cluster.pki import Authority
from toolchain.local_cluster.processes import Program, wait_until
from toolchain.local_cluster.programs import Programs

CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
# The release names its webhook configurations with this prefix (its config/default kustomization).
NAME_PREFIX = "lws-"


def apply_crd(api: Api, programs: Programs) -> None:
    """Apply the release's CRD (the API server establishes it while the rest starts)."""
    # libyaml's loader when there is one: the CRD (it embeds the pod template's schema) is 1.2 MB.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    api.apply(yaml.load(programs.lws_crd.read_text(), Loader=loader))


def start(
    cluster: Cluster,
    api: Api,
    pki: Authority,
    launch: Callable[..., Program],
    watched: list[Program],
    timeout_s: float,
) -> Program:
    """Once the CRD is established, start the controller, and register its webhooks once it
    serves them."""
    programs, ports, folder = cluster.programs, cluster.ports, cluster.folder / "lws"
    certs = folder / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    serving = pki.issue("lws-webhook", "lws-webhook", ips=["127.0.0.1"], dns=["localhost"])
    (certs / "tls.crt").write_bytes(serving.cert.read_bytes())
    (certs / "tls.key").write_bytes(serving.key.read_bytes())
    identity = pki.issue("lws-controller", "lws-controller", "system:masters")
    kubeconfig = write_kubeconfig(
        folder / "kubeconfig", server=cluster.server, ca=pki.ca.cert, client=identity, context="local"
    )
    config = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": ports.lws_webhook, "certDir": str(certs)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.lws_health}"},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    wait_until(
        "the LeaderWorkerSet CRD established", lambda: _established(api), watch=watched, timeout_s=timeout_s
    )
    argv = [
        programs.bin("lws-controller"),
        f"--config={folder / 'config.yaml'}",
        f"--kubeconfig={kubeconfig}",
    ]
    controller = launch("lws-controller", argv)
    watch = [*watched, controller]
    wait_until(
        "the LeaderWorkerSet controller ready",
        lambda: _ready(ports.lws_health),
        watch=watch,
        timeout_s=timeout_s,
    )
    wait_until("its webhooks served", lambda: _listening(ports.lws_webhook), watch=watch, timeout_s=timeout_s)
    for webhook in webhook_configurations(
        programs.lws_webhooks.read_text(), ports.lws_webhook, pki.ca.cert.read_bytes()
    ):
        api.apply(webhook)
    return controller


def webhook_configurations(rendered: str, port: int, ca: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, each webhook called at ``https://127.0.0.1:<port>``
    with its path, its certificate checked against ``ca``."""
    found = []
    for document in yaml.safe_load_all(rendered):
        if not document or not document["kind"].endswith("WebhookConfiguration"):
            continue
        document["metadata"]["name"] = NAME_PREFIX + document["metadata"]["name"]
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca).decode(),
            }
        found.append(document)
    return found


def _established(api: Api) -> bool:
    crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}") or {}
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0
