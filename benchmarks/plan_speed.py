"""How long the project takes to judge a campaign's candidates without launching them: ``make_plan``
(each candidate's stack built, preflight, the memory plan by the release's own rules), the work of
``sweep plan`` and of the start of ``sweep run``. Each round begins as a new process would, with
no parser built yet.

Run: ``. .venv/sglang-stacks.env && python benchmarks/plan_speed.py [campaign.yaml ...] [--rounds 3]``
(default: the search-efficiency spaces' campaign files).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sglang_flags
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.plan import make_plan

ROOT = Path(__file__).resolve().parent.parent
SPACES = ("search-large.yaml", "search-32-short.yaml", "search-64-long.yaml")


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("campaigns", nargs="*", type=Path, default=[ROOT / "benchmarks" / s for s in SPACES])
    cli.add_argument("--rounds", type=int, default=3)
    args = cli.parse_args()
    print(f"{'campaign':<24} {'candidates':>10} {'kept':>6} {'median s':>9} {'ms each':>8} {'parsers':>8}")
    for path in args.campaigns:
        campaign = load_campaign(path)
        seconds = []
        for _ in range(args.rounds):
            sglang_flags.parser.cache_clear()
            start = time.perf_counter()
            plan = make_plan(path.stem, campaign, ROOT / "stacks")
            seconds.append(time.perf_counter() - start)
        median = statistics.median(seconds)
        built = sglang_flags.parser.cache_info().currsize
        kept = sum(1 for row in plan.rows if row.verdict == "kept")
        print(
            f"{path.stem:<24} {len(plan.rows):>10} {kept:>6} {median:>9.2f} "
            f"{1000 * median / len(plan.rows):>8.2f} {built:>8}"
        )


if __name__ == "__main__":
    main()
