"""A few calls to the cluster's API server (readiness, the node, patches) as the cluster's admin,
over HTTPS to 127.0.0.1 with the cluster's CA and the admin's client certificate."""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx

from toolchain.local_cluster.pki import KeyPair


class Api:
    """The API server at ``server`` (``https://127.0.0.1:<port>``)."""

    def __init__(self, server: str, ca: KeyPair, admin: KeyPair) -> None:
        tls = ssl.create_default_context(cafile=str(ca.cert))
        tls.load_cert_chain(str(admin.cert), str(admin.key))
        self._client = httpx.Client(base_url=server, verify=tls, timeout=10.0)

    def close(self) -> None:
        self._client.close()

    def ready(self) -> bool:
        """Whether ``/readyz`` answers ok (False while the server is not up)."""
        try:
            return self._client.get("/readyz").text == "ok"
        except httpx.HTTPError:
            return False

    def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``; None when it does not exist."""
        response = self._client.get(path)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the object at ``path``."""
        response = self._client.patch(
            path, content=json.dumps(body), headers={"Content-Type": "application/merge-patch+json"}
        )
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def apply(self, document: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of a cluster-scoped object of a named API group whose plural is its
        kind's name with an ``s`` (a CRD, a webhook configuration)."""
        plural = document["kind"].lower() + "s"
        path = f"/apis/{document['apiVersion']}/{plural}/{document['metadata']['name']}"
        response = self._client.patch(
            path,
            params={"fieldManager": "sglang-stacks-local-cluster", "force": "true"},
            content=json.dumps(document),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result
