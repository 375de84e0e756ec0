#!/usr/bin/env bash
# Starts the local Kubernetes cluster for the demo (`pulumi up -s k8s-baseline`) and returns, leaving
# it running: etcd, the control plane, one kubelet with containerd and runc whose node shows the
# emulator profile's 8 GPUs, and the LeaderWorkerSet controller, all on 127.0.0.1, with the
# emulator's image imported. Bootstraps and builds what is missing first (scripts/ensure-k8s.sh:
# long the first time). Idempotent: when the cluster is up, it says so.
#
#   scripts/k8s-up.sh [--folder DIR] [--profile NAME] [--no-leader-worker-set]
#
# State, logs and the kubeconfig (context `sglang-stacks-local`) are in ~/.sglang-stacks/k8s unless
# --folder says otherwise; scripts/k8s-down.sh stops the cluster and removes them. Needs root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/bootstrap.sh
scripts/ensure-k8s.sh
. .venv/sglang-stacks.env
exec python -m toolchain.local_cluster up "$@"
