"""A real Kubernetes cluster on 127.0.0.1 for tests (toolchain/local_cluster): etcd, the control
plane, one kubelet with containerd and runc whose node shows the emulator profile's GPUs, and the
LeaderWorkerSet controller; the emulator's image imported. One per test session (per worker),
in a temporary folder, stopped at the end with nothing left behind.

    def test_something(kube_cluster: Cluster) -> None:
        kube_cluster.kubectl("apply", "--filename=-", input=manifest)  # or KUBECONFIG=.kubeconfig
        image = kube_cluster.emulator_image  # sglang-stacks.local/emulator:<digest>

Pods that serve use the host's network (``hostNetwork: true``), each on its own port from
tests/_ports.py, and are reached at 127.0.0.1. Without the cluster's programs the tests fail with
the command that installs them (scripts/ensure-k8s.sh); the cluster needs root.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests._ports import free_port
from toolchain.local_cluster import Cluster, ClusterError, running_cluster


def session_cluster() -> Iterator[Cluster]:
    """The session's cluster, its emulator image imported (the ``kube_cluster`` fixture of
    tests/conftest.py); after the session, a check that stopping it left nothing behind."""
    started = time.monotonic()
    try:
        with running_cluster(free_port=free_port) as cluster:
            print(f"local cluster ready in {time.monotonic() - started:.1f} s")
            yield cluster
    except ClusterError as error:
        pytest.fail(str(error), pytrace=False)
    leftovers = cluster.leftovers()
    assert not leftovers, f"The stopped cluster left: {leftovers}"
