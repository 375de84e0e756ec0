#!/usr/bin/env bash
# The test command: bootstraps everything the suite needs (toolchain, OpenSSH for the SSH tests),
# then runs the lint and type checks and the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/bootstrap.sh
scripts/ensure-sshd.sh
set -a
. .venv/sglang-stacks.env
set +a

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy"
mypy .
echo "== pytest"
python -m pytest "$@"
