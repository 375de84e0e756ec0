"""Which test files run on the session's local Kubernetes cluster, and whether a pytest command
line selects any of them: scripts/test.sh builds the cluster's programs and pulumi-kubernetes's
provider only for a run that uses them (`python -m tests.cluster_files ARGS...` exits 0 if it does,
1 if not).

Standard library only: scripts/test.sh asks before anything else is set up."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent

CLUSTER_FILE_PREFIXES = ("test_kube_", "test_local_cluster")
"""The names of the files that use the ``kube_cluster`` fixture (tests/test_kube_launch.py checks
that every user of the fixture is named so)."""


def cluster_file(path: str) -> bool:
    """Whether the test file ``path`` (or a test's node id) runs on the session's cluster."""
    return Path(path.split("::", 1)[0]).name.startswith(CLUSTER_FILE_PREFIXES)


def selects_cluster_files(pytest_args: list[str]) -> bool:
    """Whether ``pytest_args`` (as scripts/test.sh passes them on) run any cluster file: no path at
    all is the whole suite; a folder runs every cluster file under it; a file or node id is one.
    Options are passed over, and so is an option's value (``-k kube``, ``-p plugin``): a word that
    names no file or folder of the project is not a path pytest would run (``-k deploy`` still
    runs the whole suite, filtered, and so needs the cluster)."""
    paths = [
        path
        for arg in pytest_args
        if not arg.startswith("-") and (path := _ROOT / arg.split("::", 1)[0]).exists()
    ]
    if not paths:
        return True
    for path in paths:
        if path.is_dir():
            if any(cluster_file(str(found)) for found in path.rglob("test_*.py")):
                return True
        elif cluster_file(str(path)):
            return True
    return False


if __name__ == "__main__":
    sys.exit(0 if selects_cluster_files(sys.argv[1:]) else 1)
