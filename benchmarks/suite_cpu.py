"""Where the test suite's time and CPU go, by test file: sums the per-test lines the suite writes
with ``SGLANG_STACKS_TEST_CPU`` set (tests/conftest.py).

    SGLANG_STACKS_TEST_CPU=/tmp/suite-cpu scripts/test.sh
    python benchmarks/suite_cpu.py /tmp/suite-cpu-*.tsv

A test's CPU is its worker's own and that of the processes it started that have ended (Pulumi, the
program and its providers, the tool's commands, host programs), counted when the worker collects
them: a process no test waited for (a driver started with ``Popen`` and left) counts for the test
during which Python's subprocess module collected it, often the next one to start a process. The
suite runs four workers on two cores, so a file's seconds also hold the time it waited for a core.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path


def by_file(paths: list[Path]) -> dict[str, tuple[int, float, float]]:
    """Each test file's tests, seconds and CPU seconds."""
    found: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            nodeid, seconds, own, ended = line.split("\t")
            row = found[nodeid.split("::", 1)[0]]
            row[0] += 1
            row[1] += float(seconds)
            row[2] += float(own) + float(ended)
    return {name: (int(row[0]), row[1], row[2]) for name, row in found.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="the workers' .tsv files")
    parser.add_argument("--top", type=int, default=25, help="files to list (the most CPU first)")
    args = parser.parse_args(argv)
    files = by_file(args.reports)
    tests = sum(row[0] for row in files.values())
    seconds = sum(row[1] for row in files.values())
    cpu = sum(row[2] for row in files.values())
    print(f"{tests} tests in {len(files)} files: {seconds:,.0f} s of test time, {cpu:,.0f} CPU-s")
    print("| file | tests | seconds | CPU-s | share of CPU |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (count, spent, used) in sorted(files.items(), key=lambda item: -item[1][2])[: args.top]:
        print(f"| {name} | {count} | {spent:,.0f} | {used:,.0f} | {100 * used / cpu:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
