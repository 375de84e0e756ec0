"""The cluster's certificates, made with Debian's openssl: one certificate authority that signs the
API server's and the kubelet's serving certificates and every client's certificate (the client's
name and groups are the certificate's CN and O, as Kubernetes reads them), and the key pair that
signs service-account tokens. All of it lives in the cluster's folder and dies with it."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolchain.local_cluster.errors import ClusterError

_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_DAYS = "3650"


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM files."""

    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ClusterError(f"openssl {args[0]} failed ({result.returncode}): {result.stderr.strip()}")


class Authority:
    """A certificate authority in ``folder`` (``ca.crt``, ``ca.key``) and what it issues there."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.ca = KeyPair(folder / "ca.crt", folder / "ca.key")
        config = self._config("ca", "sglang-stacks local cluster CA", None, "CA:TRUE", "keyCertSign,cRLSign")
        _openssl(
            "req",
            "-x509",
            *_CURVE,
            "-days",
            _DAYS,
            "-config",
            str(config),
            "-keyout",
            str(self.ca.key),
            "-out",
            str(self.ca.cert),
        )

    def issue(
        self,
        name: str,
        common_name: str,
        organization: str | None = None,
        *,
        ips: Sequence[str] = (),
        dns: Sequence[str] = (),
    ) -> KeyPair:
        """A certificate ``<name>.crt`` for ``common_name`` (and ``organization``), valid for both
        serving (at ``ips``/``dns``) and client authentication."""
        pair = KeyPair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        names = [f"IP:{ip}" for ip in ips] + [f"DNS:{host}" for host in dns]
        config = self._config(
            name,
            common_name,
            organization,
            "CA:FALSE",
            "digitalSignature,keyEncipherment",
            extended="serverAuth,clientAuth",
            alt_names=",".join(names),
        )
        _openssl(
            "req",
            "-x509",
            *_CURVE,
            "-days",
            _DAYS,
            "-config",
            str(config),
            "-CA",
            str(self.ca.cert),
            "-CAkey",
            str(self.ca.key),
            "-keyout",
            str(pair.key),
            "-out",
            str(pair.cert),
        )
        return pair

    def signing_key(self, name: str) -> KeyPair:
        """A bare key pair (``<name>.key``, public half ``<name>.pub``), for service-account tokens."""
        pair = KeyPair(self.folder / f"{name}.pub", self.folder / f"{name}.key")
        _openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", str(pair.key)
        )
        _openssl("pkey", "-in", str(pair.key), "-pubout", "-out", str(pair.cert))
        return pair

    def _config(
        self,
        name: str,
        common_name: str,
        organization: str | None,
        constraints: str,
        usage: str,
        *,
        extended: str = "",
        alt_names: str = "",
    ) -> Path:
        # A config of our own: the system's adds CA extensions to every `req -x509` certificate.
        lines = ["[req]", "prompt = no", "distinguished_name = dn", "x509_extensions = ext", "[dn]"]
        lines += [f"O = {organization}"] if organization else []
        lines += [f"CN = {common_name}", "[ext]", f"basicConstraints = critical,{constraints}"]
        lines += [f"keyUsage = critical,{usage}", "subjectKeyIdentifier = hash"]
        lines += [f"extendedKeyUsage = {extended}"] if extended else []
        lines += [f"subjectAltName = {alt_names}"] if alt_names else []
        path = self.folder / f"{name}.cnf"
        path.write_text("\n".join(lines) + "\n")
        return path
