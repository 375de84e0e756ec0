"""What the environment check costs on a refresh with a real SGLang release: ``import sglang``
(what the check ran before) against ``sglang_installed.py`` (what it runs now: the version from
the metadata, every unconditional requirement looked up, nothing imported).

The benchmark makes a virtualenv (``--venv``, kept between runs) and installs into it, with pip
from the package index, the real SGLang wheel without its dependencies, then the distributions its
top-level import needs, found by importing it until it succeeds. It installs neither torch nor
the GPU libraries, so the check reports those requirements as missing: the metadata check still
looks every requirement up, as it does on a complete host. Both checks run as env_check.sh runs
them: the venv's python from ``/``, without ``PYTHONPATH``. They are interleaved, ``--rounds``
times each, after one warm-up run of each; the table gives medians and ranges, wall and CPU.

Run: ``python benchmarks/env_check.py [--release 0.5.8] [--rounds 7] [--venv DIR]``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
import venv
from pathlib import Path

from cpu_time import children_cpu_s

ROOT = Path(__file__).resolve().parent.parent
CHECK = (ROOT / "sglang_stacks" / "hostops" / "programs" / "sglang_installed.py").read_text()
IMPORT = "import sglang; print(sglang.__version__)"
# Import names whose distribution is named otherwise.
DISTRIBUTIONS = {"IPython": "ipython", "PIL": "pillow", "yaml": "pyyaml", "zmq": "pyzmq"}
_MISSING = re.compile(r"No module named '([^'.]+)")


def pip(python: Path, *args: str) -> None:
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-warn-conflicts",
            *args,
        ],
        check=True,
    )


def prepare(folder: Path, release: str) -> Path:
    """A venv holding SGLang ``release`` and what ``import sglang`` needs; returns its python."""
    python = folder / "bin" / "python"
    if not python.exists():
        venv.create(folder, with_pip=True)
        pip(python, "--no-deps", f"sglang=={release}")
    for _ in range(30):
        done = run(python, IMPORT)
        if done.returncode == 0:
            return python
        missing = _MISSING.search(done.stderr)
        if missing is None:
            raise SystemExit(f"import sglang fails for another reason than a missing module:\n{done.stderr}")
        name = missing.group(1)
        print(f"installing {DISTRIBUTIONS.get(name, name)} (import sglang needs {name})", flush=True)
        pip(python, DISTRIBUTIONS.get(name, name))
    raise SystemExit("import sglang still fails after 30 installs")


def run(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    return subprocess.run([str(python), "-c", code], cwd="/", env=env, capture_output=True, text=True)


def timed(python: Path, code: str) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall seconds, CPU seconds of the child, its result)."""
    cpu, started = children_cpu_s(), time.perf_counter()
    done = run(python, code)
    return time.perf_counter() - started, children_cpu_s() - cpu, done


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="0.5.8")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "sglang-stacks-env-check")
    args = parser.parse_args()

    python = prepare(args.venv / args.release, args.release)
    checks = {"import sglang (before)": IMPORT, "sglang_installed.py (now)": CHECK}
    for code in checks.values():
        run(python, code)  # warm-up: bytecode written, files in the page cache
    walls: dict[str, list[float]] = {name: [] for name in checks}
    cpus: dict[str, list[float]] = {name: [] for name in checks}
    answers: dict[str, str] = {}
    for _ in range(args.rounds):
        for name, code in checks.items():
            wall, cpu, done = timed(python, code)
            walls[name].append(wall)
            cpus[name].append(cpu)
            answers[name] = (done.stdout.strip() or done.stderr.strip().splitlines()[-1])[:100]
    print(f"\nSGLang {args.release}, {args.rounds} rounds, load average {os.getloadavg()[0]:.2f}")
    print("| check | wall (s), median (range) | CPU (s), median (range) | answer |")
    print("| --- | --- | --- | --- |")
    for name in checks:
        print(f"| {name} | {summary(walls[name])} | {summary(cpus[name])} | {answers[name]} |")
    ratio = statistics.median(walls["import sglang (before)"]) / statistics.median(
        walls["sglang_installed.py (now)"]
    )
    print(f"\nimport sglang takes {ratio:.1f}x the metadata check's wall time.")


if __name__ == "__main__":
    main()
