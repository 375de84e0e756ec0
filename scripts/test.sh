#!/usr/bin/env bash
# The test command: bootstraps everything the suite needs (toolchain, OpenSSH for the SSH tests,
# PostgreSQL for the shared campaign study, Chromium for the dashboard's browser test, and for a run
# with cluster tests pulumi-kubernetes's provider plugin and the local Kubernetes cluster's
# programs: built once, long the first time, see README),
# then runs the lint and type checks and the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# A run with cluster tests (the whole suite, or a path that names one) needs the local cluster's
# programs and pulumi-kubernetes's provider, long to build the first time: the programs' build starts
# at once, beside the bootstrap (which builds the Pulumi CLI the first time), and the provider's as
# soon as the bootstrap is done, so the three builds overlap (README: the first run's time).
# tests/cluster_files.py, which decides, needs only the standard library.
# Each build runs in a process group of its own (set -m), stopped whole if this script ends first.
cluster_builds=()
stop_cluster_builds() { ((${#cluster_builds[@]})) && kill -- "${cluster_builds[@]/#/-}" 2>/dev/null; true; }
trap stop_cluster_builds EXIT
in_background() {
    set -m
    "$@" &
    cluster_builds+=($!)
    set +m
}
needs_cluster=false
if python3 -m tests.cluster_files "$@"; then
    needs_cluster=true
    in_background scripts/ensure-k8s.sh
fi
scripts/bootstrap.sh
if $needs_cluster; then
    in_background bash -c 'scripts/ensure-k8s-provider.sh >/dev/null'
fi
scripts/ensure-sshd.sh
scripts/ensure-postgres.sh
scripts/ensure-chromium.sh
for build in "${cluster_builds[@]}"; do
    wait "$build"
done
cluster_builds=()
set -a
. .venv/sglang-stacks.env
set +a

echo "== ruff"
ruff check .
ruff format --check .
# The type check runs beside the tests, which start with a file each on four workers; its verdict
# is printed, and counts, once they are done. Its cache is kept with the builds, shared by the
# checkouts of this machine (mypy reuses an entry only for a file whose hash it matches): a fresh
# clone's check takes 3 CPU-seconds instead of 28 once another checkout has been checked.
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${SGLANG_STACKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sglang-stacks}/mypy}"
mypy_log=$(mktemp)
mypy . >"$mypy_log" 2>&1 &
mypy_pid=$!
trap 'stop_cluster_builds; kill "$mypy_pid" 2>/dev/null || true; rm -f "$mypy_log"' EXIT
echo "== pytest"
# Test files run side by side, four at once, each file whole on one worker so that the deployments
# its tests share are made once, in the order tests/conftest.py gives them (the slow files first).
# Four on two cores: most of a test's time is waiting (a benchmark's requests decode in real time,
# a server starts, an update settles), so four workers finished the suite in 28.6 min where one per
# core took 34.2 (README). SGLANG_STACKS_TEST_WORKERS=0 runs them all in this process, one after
# another.
pytest_status=0
python -m pytest -n "${SGLANG_STACKS_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder --durations=30 "$@" ||
    pytest_status=$?
echo "== mypy"
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
cat "$mypy_log"
exit $((pytest_status ? pytest_status : mypy_status))
