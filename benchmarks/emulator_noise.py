"""How much a real emulator trial's tok/s varies: the noise the search-efficiency benchmark adds.

Starts the real emulator (``python -m sglang_emulator``, startup at time scale 0.002) with the argv
the project renders for a stack, runs the project's load generator against it over HTTP with the
stack's benchmark section, and repeats that with a fresh server ``--trials`` times. Prints each
trial's repetitions and the coefficient of variation (standard deviation over mean) of the
repetitions within a trial (pooled over trials) and of the trial means across trials.

Run: ``python benchmarks/emulator_noise.py [--trials 3] [--stack baseline-bs128]``
(``--campaign`` takes the workload of a campaign file instead of the stack's).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from statistics import fmean, stdev

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_emulator.launcher import start_emulator
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.spec import load_spec
from sglang_stacks.config.stackfile import read_stack_file
from sglang_stacks.hostops.loadgen import client, contract

ROOT = Path(__file__).resolve().parent.parent


def measure(stack: str, trials: int, campaign: Path | None) -> tuple[float, float, list[list[float]]]:
    """(pooled within-trial CV, across-trial CV of the means, each trial's tok/s runs)."""
    sections = read_stack_file(stack, ROOT / "stacks").sections
    if campaign is not None:
        campaign_spec = load_campaign(campaign)
        declared = campaign_spec.workload
        if declared is not None:
            written = campaign_spec.workload_keys
            sections["benchmark"] = {k: v for k, v in declared.settings().items() if k in written}
    spec = load_spec(sections, stack)
    # The launcher picks a free port; the server listens on 127.0.0.1 only.
    argv = _without(
        _without(render_argv(spec.launch_flags(), spec.environment.sglang_release), "--port"), "--host"
    )
    runs: list[list[float]] = []
    for number in range(trials):
        with (
            tempfile.TemporaryDirectory(prefix="emulator-noise-") as state,
            start_emulator(argv, state_dir=state) as server,
        ):
            settings = spec.benchmark.settings()
            workload = contract.Workload.from_settings(server.base_url, settings)
            document = client.run(workload)
            tok_s = document.levels[-1].tok_s_runs
            runs.append(tok_s)
            print(
                f"trial {number + 1}: tok/s per repetition {', '.join(f'{v:.3f}' for v in tok_s)}", flush=True
            )
    within = math.sqrt(fmean(stdev(r) ** 2 / fmean(r) ** 2 for r in runs))
    means = [fmean(r) for r in runs]
    across = stdev(means) / fmean(means) if len(means) > 1 else 0.0
    return within, across, runs


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value."""
    if flag not in argv:
        return argv
    at = argv.index(flag)
    return argv[:at] + argv[at + 2 :]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="baseline-bs128")
    parser.add_argument("--campaign", type=Path, help="take the workload of this campaign file")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    within, across, runs = measure(args.stack, args.trials, args.campaign)
    values = [v for r in runs for v in r]
    print(
        f"{args.stack}: {len(runs)} trials, {len(values)} repetitions, mean {fmean(values):.3f} tok/s; "
        f"CV within a trial {100 * within:.3f} %, across trial means {100 * across:.3f} %"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
