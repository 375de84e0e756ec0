"""A real Kubernetes cluster on 127.0.0.1 for tests (toolchain/local_cluster): etcd, the control
plane, one kubelet with containerd and runc whose node shows the emulator profile's GPUs, and the
LeaderWorkerSet controller; the emulator's image imported. One per test session, in a temporary
folder, stopped at the end with nothing left behind. Under pytest-xdist each worker's session has
fixtures of its own: scripts/test.sh sends every file that uses the cluster to one worker
(tests/conftest.py), and whatever the distribution, a worker's cluster starts only once another
worker's has stopped (``one_cluster_at_a_time``), so two never share the machine's cores and ports.

    def test_something(kube_cluster: Cluster) -> None:
        kube_cluster.kubectl("apply", "--filename=-", input=manifest)  # or KUBECONFIG=.kubeconfig
        image = kube_cluster.emulator_image  # sglang-stacks.local/emulator:<digest>

Pods that serve use the host's network (``hostNetwork: true``), each on its own port from
tests/_ports.py, and are reached at 127.0.0.1. Without the cluster's programs the tests fail with
the command that installs them (scripts/ensure-k8s.sh); the cluster needs root.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._ports import free_port, free_ports_in_a_row
from toolchain.local_cluster import Cluster, ClusterError, running_cluster

LOCK_FILE = "local-cluster.lock"


@contextlib.contextmanager
def one_cluster_at_a_time(temporary: pytest.TempPathFactory) -> Iterator[None]:
    """The block holds the test run's cluster lock: under pytest-xdist, an exclusive lock on a file
    in the folder every worker's temporary folder is in (one per run), held until the block ends;
    outside xdist, the session is the run and needs none."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    path = Path(temporary.getbasetemp()).parent / LOCK_FILE
    with path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("another worker's local cluster is running: waiting until it stops")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def session_cluster(temporary: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The session's cluster, its emulator image imported (the ``kube_cluster`` fixture of
    tests/conftest.py); after the session, a check that stopping it left nothing behind."""
    with one_cluster_at_a_time(temporary):
        started = time.monotonic()
        try:
            with running_cluster(free_port=free_port) as cluster:
                print(f"local cluster ready in {time.monotonic() - started:.1f} s")
                yield cluster
        except ClusterError as error:
            pytest.fail(str(error), pytrace=False)
    leftovers = cluster.leftovers()
    assert not leftovers, f"The stopped cluster left: {leftovers}"


def left_after_destroy(listed: Callable[[], list[dict[str, Any]]], timeout_s: float = 60.0) -> list[str]:
    """What of a destroyed stack's objects (``listed``: the managed objects of the kinds the test
    checks, as kubectl lists them) is still there once every deletion has had ``timeout_s`` to end;
    ``Kind/name`` each. What destroy deleted may linger for a while: a pod for its grace period, an
    object deleted in the foreground until its pods are gone. Any object but a pod (whose deletion
    its controller's ends with) must be being deleted when destroy returns."""
    left = listed()
    kept = [item for item in left if item["kind"] != "Pod" and not item["metadata"].get("deletionTimestamp")]
    assert kept == [], [f"{item['kind']}/{item['metadata']['name']}" for item in kept]
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = listed()
    return [f"{item['kind']}/{item['metadata']['name']}" for item in left]


def cluster_fleet_config(
    stack: str, cluster: Cluster, namespace: str, folder: str, replicas: int
) -> dict[str, Any]:
    """The ``config:`` of the shipped fleet stack ``stack`` on a cluster, pointed at the test's
    cluster, namespace, free ports (the router's, and ``replicas`` server ports in a row) and
    ``folder``, its emulator loading 500 times faster than a real server."""
    root = Path(__file__).resolve().parent.parent
    config: dict[str, Any] = yaml.safe_load((root / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    config["sglang-stacks:host"]["cluster"] |= {
        "kubeconfig": str(cluster.kubeconfig),
        "context": cluster.context,
        "namespace": namespace,
        "image": cluster.emulator_image,
        "schedule_timeout_s": 60,
    }
    config["sglang-stacks:fleet"]["router"] |= {
        "port": free_port(),
        "metrics_port": free_port(),
        "state_dir": folder,
    }
    config["sglang-stacks:server"]["port"] = free_ports_in_a_row(replicas)
    config["sglang-stacks:environment"]["emulator"]["time_scale"] = 0.002
    config["sglang-stacks:launch"] = {"ready_timeout_s": 180, "stop_timeout_s": 5}
    return config
