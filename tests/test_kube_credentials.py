"""A cluster's credentials stay where the user keeps them: the Kubernetes client's key files live in
the command's private folder and go with it, even when the command is killed, and preflight warns
when the kubeconfig holds a credential inline that the pulumi-kubernetes provider will copy into the
temp folder. The cluster itself is exercised in tests/test_kube_deploy.py."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import yaml

from sglang_stacks.kube.client import ClusterAccess
from tests._pulumi import ROOT
from tests.test_transport import files_holding, wait_for

KEY = b"-----BEGIN EC PRIVATE KEY-----\nnot-a-real-key-but-secret-anyway\n-----END EC PRIVATE KEY-----\n"


def kubeconfig(path: Path, user: Mapping[str, object]) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": dict(user)}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(document))
    return path


def inline_user() -> dict[str, object]:
    return {
        "client-certificate-data": base64.b64encode(b"certificate").decode(),
        "client-key-data": base64.b64encode(KEY).decode(),
    }


def test_a_kubeconfig_with_its_key_inline_is_warned_about_with_the_fix(tmp_path: Path) -> None:
    inline = ClusterAccess(kubeconfig=str(kubeconfig(tmp_path / "inline", inline_user())))
    [finding] = inline.findings()
    assert (finding.severity, finding.code, finding.key) == (
        "warning",
        "kubeconfig-copied-by-provider",
        "host.cluster.kubeconfig",
    )
    assert "client-key-data" in finding.message and "never removes it" in finding.message
    assert "client-key" in finding.fix and "exec" in finding.fix
    token = ClusterAccess(kubeconfig=str(kubeconfig(tmp_path / "token", {"token": "abc"})), context="ctx")
    assert token.inline_secrets() == ["token"]
    by_path = {"client-certificate": str(tmp_path / "c.crt"), "client-key": str(tmp_path / "c.key")}
    plugin = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token"}}
    for user in (by_path, plugin):
        assert ClusterAccess(kubeconfig=str(kubeconfig(tmp_path / "quiet", user))).findings() == []


def test_the_clients_key_files_leave_with_a_killed_command_not_in_the_temp_folder(tmp_path: Path) -> None:
    # The client needs the key as a file for TLS. Written to the shared temp folder (the library's
    # default), it stayed there whenever the process ended without running its exit handlers.
    temp = tmp_path / "temp"
    temp.mkdir()
    config = kubeconfig(tmp_path / "kubeconfig", inline_user())
    script = textwrap.dedent(
        f"""
        import time
        from sglang_stacks.kube.client import ClusterAccess
        ClusterAccess(kubeconfig={str(config)!r}).api_client()
        print("loaded", flush=True)
        time.sleep(60)
        """
    )
    env = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"}
    client = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**env, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdout is not None and client.stdout.readline() == "loaded\n"

    def holding_the_key() -> list[Path]:
        return files_holding([KEY], 0, roots=[str(temp)])  # every file of the client's temp folder

    assert holding_the_key()  # the files exist while the client may use them ...
    assert all(path.parent.stat().st_mode & 0o077 == 0 for path in holding_the_key())  # ... privately
    client.send_signal(signal.SIGKILL)
    client.wait()
    wait_for(lambda: not holding_the_key())  # asserts once 30 s have passed
