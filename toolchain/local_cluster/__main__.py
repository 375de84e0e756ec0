"""``python -m toolchain.local_cluster up|down|image``: the local cluster from a shell.

``up`` starts a cluster with its state in ``--folder`` (default ``~/.sglang-stacks/k8s``), imports
the emulator's image and returns, leaving the cluster running; it prints the kubeconfig and the
image. Run again, it says the cluster is up. ``down`` stops it and removes the folder. ``image``
builds the emulator's image (cached by content) and prints its tarball.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolchain.local_cluster.cluster import Cluster
from toolchain.local_cluster.errors import ClusterError
from toolchain.local_cluster.images import emulator_image
from toolchain.local_cluster.programs import find_programs
from toolchain.local_cluster.start import start_cluster

DEFAULT_FOLDER = Path("~/.sglang-stacks/k8s").expanduser()


def _up(folder: Path, profile: str | None, leader_worker_set: bool) -> int:
    if (folder / "cluster.json").exists():
        cluster = Cluster.load(folder)
        if cluster.cgroup.pids():
            print(f"The local cluster is up (its folder: {folder}).\nexport KUBECONFIG={cluster.kubeconfig}")
            return 0
        cluster.stop()
    cluster = start_cluster(folder, profile=profile, leader_worker_set=leader_worker_set)
    print(
        f"The local cluster is up: node {cluster.node_name}, API server {cluster.server}, "
        f"context {cluster.context}.\nThe emulator's image: {cluster.emulator_image}\n"
        f"Logs: {folder / 'logs'}\n"
        f"export KUBECONFIG={cluster.kubeconfig}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m toolchain.local_cluster", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the cluster (unless it is up) and import the emulator's image")
    up.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    up.add_argument("--profile", help="the emulator profile whose GPUs the node advertises")
    up.add_argument(
        "--no-leader-worker-set", action="store_true", help="without the LeaderWorkerSet controller"
    )
    down = commands.add_parser("down", help="stop the cluster and remove its folder")
    down.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    commands.add_parser("image", help="build the emulator's image; print its tarball and reference")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            return _up(args.folder, args.profile, not args.no_leader_worker_set)
        if args.command == "down":
            if (args.folder / "cluster.json").exists():
                Cluster.load(args.folder).stop()
            print(f"The local cluster in {args.folder} is down.")
            return 0
        image = emulator_image(find_programs())
        print(f"{image.tarball}\n{image.ref}")
        return 0
    except ClusterError as error:
        print(f"local cluster: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
