#!/usr/bin/env bash
# The Kubernetes demo in one command: starts the local cluster on 127.0.0.1 (scripts/k8s-up.sh: its
# node advertises the emulator profile's GPUs, the emulator's image imported; built once), installs
# pulumi-kubernetes's provider plugin (scripts/ensure-k8s-provider.sh, built once), deploys the
# shipped stack k8s-baseline to the cluster and prints its outputs (tok_s among them). The cluster
# keeps running: `pulumi destroy -s k8s-baseline`, then scripts/k8s-down.sh. Needs root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/k8s-up.sh
scripts/ensure-k8s-provider.sh >/dev/null
. scripts/env.sh
pulumi up --yes --skip-preview -s k8s-baseline
pulumi stack output -s k8s-baseline
