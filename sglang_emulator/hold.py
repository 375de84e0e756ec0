"""Another process holding GPU memory on the emulated host, as a notebook or a stray job holds it on a
real one: the emulator's ``nvidia-smi`` lists it with its pid, and emulated servers find that much
less free, until it ends.

Run as ``python -m sglang_emulator.hold --mib 2048 --gpus 0,1`` (``--name`` sets the process name
nvidia-smi shows). It prints ``holding <pid>`` once its memory is visible and holds it until it is
stopped (SIGTERM or SIGINT).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from types import FrameType

from sglang_emulator.state import state_dir

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_emulator.hold", description=__doc__)
    parser.add_argument("--mib", type=int, required=True, help="memory held on each GPU (MiB)")
    parser.add_argument("--gpus", required=True, help="comma-separated GPU indices, e.g. 0,1,2")
    parser.add_argument("--name", default="python3", help="the process name nvidia-smi lists")
    args = parser.parse_args(argv)
    try:
        gpus = [int(index) for index in args.gpus.split(",") if index.strip()]
    except ValueError:
        parser.error(f"--gpus {args.gpus!r}: use comma-separated GPU indices, e.g. 0,1,2")
    state = state_dir()
    done = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    state.record(args.name, dict.fromkeys(gpus, args.mib), port=0)
    try:
        print(f"holding {os.getpid()}", flush=True)
        done.wait()
    finally:
        state.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
