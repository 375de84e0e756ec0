"""Kubeconfig files: one cluster, one user (a client certificate), one context.

The cluster's own programs get the data inline, so that the file alone reaches the cluster. The
admin's kubeconfig, the one users and the pulumi-kubernetes provider are given, names the
certificate files instead: the provider writes a copy of the kubeconfig it is given into the temp
folder at every operation and never removes it, and such a copy then holds paths, not the key."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from toolchain.local_cluster.pki import KeyPair


def _inline(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(
    path: Path, *, server: str, ca: Path, client: KeyPair, context: str, inline: bool = True
) -> Path:
    """Write a kubeconfig whose current context ``context`` reaches ``server`` as ``client``, with
    the certificates and key inline, or named by their absolute paths when ``inline`` is false."""
    if inline:
        cluster = {"server": server, "certificate-authority-data": _inline(ca)}
        user = {"client-certificate-data": _inline(client.cert), "client-key-data": _inline(client.key)}
    else:
        cluster = {"server": server, "certificate-authority": str(ca.resolve())}
        user = {"client-certificate": str(client.cert.resolve()), "client-key": str(client.key.resolve())}
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path
