#!/usr/bin/env bash
# Stops the local Kubernetes cluster scripts/k8s-up.sh started (every process, cgroup, mount and
# network interface it made) and removes its folder.
#
#   scripts/k8s-down.sh [--folder DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

. .venv/sglang-stacks.env
exec python -m toolchain.local_cluster down "$@"
