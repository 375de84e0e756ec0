#!/usr/bin/env bash
# The test command: bootstraps everything the suite needs (toolchain, OpenSSH for the SSH tests,
# PostgreSQL for the shared campaign study, Chromium for the dashboard's browser test, and for a run
# with cluster tests pulumi-kubernetes's provider plugin and the local Kubernetes cluster's
# programs: built once, long the first time, see README),
# then runs the lint and type checks and the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/bootstrap.sh
scripts/ensure-sshd.sh
scripts/ensure-postgres.sh
scripts/ensure-chromium.sh
# The cluster's programs and pulumi-kubernetes's provider (long to build the first time) only for a
# run that has a test on the cluster: the whole suite, or a path that names one.
if .venv/bin/python -m tests.cluster_files "$@"; then
    scripts/ensure-k8s-provider.sh >/dev/null
    scripts/ensure-k8s.sh
fi
set -a
. .venv/sglang-stacks.env
set +a

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy"
mypy .
echo "== pytest"
# Test files run side by side, one worker per core (at most four), each file whole on one worker so
# that the deployments its tests share are made once, in the order tests/conftest.py gives them
# (the slow files first). SGLANG_STACKS_TEST_WORKERS=0 runs them all in this process, one after
# another.
python -m pytest -n "${SGLANG_STACKS_TEST_WORKERS:-auto}" --maxprocesses 4 --dist loadfile \
    --no-loadscope-reorder "$@"
