"""CPU seconds of two things every suite run and every campaign repeats in many processes:

- a process that summarises a benchmark or compares two (``results.stats``), against one that
  imports ``scipy.stats`` as the statistics did before;
- filling an emulated host's venv with the load generator's pins from a folder of kept wheels (what
  ``env_install.sh`` does once the folder holds them) against reading the package index for them.

Each figure is the median (and range) over ``--rounds`` runs, measured as the ended children's CPU,
which varies far less than their duration on a shared machine. The index install needs the package
index; ``--no-index`` leaves it out.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpu_time import children_cpu_s

from sglang_stacks.hostops.environment import LOADGEN_PINS

STATS_NOW = (
    "from sglang_stacks.results import stats\n"
    "stats.ci95([1.0, 2.0, 3.0]), stats.compare_runs([1.0, 2.0], [2.0, 3.0])"
)
STATS_BEFORE = "from scipy import stats\nstats.t.ppf(0.975, 2), stats.norm.ppf(0.975)"
"""What the statistics imported before, without this project's module: the saving it shows is less
than the whole (about 0.05 CPU-s less)."""


def _cpu(run: Callable[[], None]) -> float:
    before = children_cpu_s()
    run()
    return children_cpu_s() - before


def _python(code: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run([sys.executable, "-c", code], check=True)

    return run


def _venv_install(folder: Path, *extra: str) -> Callable[[], None]:
    def run() -> None:
        venv = Path(tempfile.mkdtemp(dir=folder))
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q"]
        subprocess.run([*pip, "--disable-pip-version-check", *extra, *LOADGEN_PINS], check=True)

    return run


def _row(name: str, run: Callable[[], None], rounds: int) -> str:
    figures = [_cpu(run) for _ in range(rounds)]
    return f"| {name} | {statistics.median(figures):.2f} ({min(figures):.2f}-{max(figures):.2f}) |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-index", action="store_true", help="leave out the install from the index")
    args = parser.parse_args(argv)
    rows = ["| process | CPU (s), median (range) |", "| --- | --- |"]
    rows.append(_row("statistics from `scipy.special` (now)", _python(STATS_NOW), args.rounds))
    rows.append(_row("`import scipy.stats` (before)", _python(STATS_BEFORE), args.rounds))
    with tempfile.TemporaryDirectory() as folder:
        wheels = Path(folder) / "wheels"
        pins = [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "-w", str(wheels)]
        subprocess.run([*pins, *LOADGEN_PINS], check=True)
        kept = _venv_install(Path(folder), "--no-index", "--find-links", str(wheels))
        rows.append(_row("venv filled from kept wheels (now)", kept, args.rounds))
        if not args.no_index:
            rows.append(_row("venv filled from the index (before)", _venv_install(Path(folder)), args.rounds))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
