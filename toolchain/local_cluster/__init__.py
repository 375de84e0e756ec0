"""A real, private Kubernetes cluster on 127.0.0.1, for the tests and the demo.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet with containerd and
runc (built or installed by scripts/ensure-k8s.sh), and the LeaderWorkerSet controller. One node,
named ``127.0.0.1`` with that address, advertising the GPUs of an emulator profile as a GPU node
does (``nvidia.com/gpu`` and GPU feature discovery's labels). Every port is on 127.0.0.1; pods that
use the host's network listen there too, each on its own port. Everything the cluster keeps and
logs is in its folder; stopping it leaves no process, cgroup, mount or network interface behind.

    with running_cluster() as cluster:             # a temporary folder; stopped after the block
        cluster.kubectl("get", "nodes")             # cluster.kubeconfig, context cluster.context
        image = cluster.import_emulator_image()     # "sglang-stacks.local/emulator:<digest>"

``python -m toolchain.local_cluster up|down|image`` does the same from a shell (scripts/k8s-up.sh).
Starting one needs root.
"""

from __future__ import annotations

from toolchain.local_cluster.cluster import CONTEXT, Cluster
from toolchain.local_cluster.errors import ClusterError
from toolchain.local_cluster.gpus import GPU_RESOURCE, gpu_labels
from toolchain.local_cluster.images import EMULATOR_IMAGE, Image, emulator_image
from toolchain.local_cluster.start import running_cluster, start_cluster

__all__ = [
    "CONTEXT",
    "EMULATOR_IMAGE",
    "GPU_RESOURCE",
    "Cluster",
    "ClusterError",
    "Image",
    "emulator_image",
    "gpu_labels",
    "running_cluster",
    "start_cluster",
]
