#!/usr/bin/env bash
# The main job: bootstraps everything, deploys a stack (default: baseline) to the built-in SGLang
# emulator host with the real Pulumi engine, benchmarks it, and prints the stack's outputs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stack=${1:-baseline}

scripts/bootstrap.sh
. scripts/env.sh
pulumi up --yes -s "$stack"
pulumi stack output --json -s "$stack"
