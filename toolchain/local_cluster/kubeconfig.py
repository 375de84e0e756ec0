"""Kubeconfig files: one cluster, one user (a client certificate), one context, the data inline so
that the file alone reaches the cluster."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from toolchain.local_cluster.pki import KeyPair


def _inline(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, *, server: str, ca: Path, client: KeyPair, context: str) -> Path:
    """Write a kubeconfig whose current context ``context`` reaches ``server`` as ``client``."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": context, "cluster": {"server": server, "certificate-authority-data": _inline(ca)}}
        ],
        "users": [
            {
                "name": context,
                "user": {
                    "client-certificate-data": _inline(client.cert),
                    "client-key-data": _inline(client.key),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path
