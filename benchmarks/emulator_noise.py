"""How much a real emulator trial's tok/s varies, within one launch and from one launch (or host)
to another: the noise the search-efficiency benchmark adds, and the floor a comparison of two trials
must allow for (``sglang_stacks.results.stats.LAUNCH_CV_PCT``).

Starts the real emulator (``python -m sglang_emulator``, startup at time scale 0.002) with the argv
the project renders for a stack, runs the project's load generator against it over HTTP with the
stack's benchmark section, and repeats that with a fresh server ``--trials`` times, ``--hosts`` of
them at once (each its own emulated host, as a campaign's pool runs them). With ``--stress N``, N
busy processes run beside it the whole time (a loaded machine). Prints each trial's repetitions,
the coefficient of variation (standard deviation over mean) of the repetitions within a trial
(pooled), of the trial means, and the part of the means' spread that the repetitions do not
explain: the between-launch CV of a one-way random-effects model, ``sqrt(max(0, var(means) -
pooled within variance / n)) / mean``, with the F test (``scipy.stats.f_oneway``) of whether the
launches differ at all.

Run: ``python benchmarks/emulator_noise.py [--trials 3] [--hosts 1] [--stress 0] [--stack baseline-bs128]``
(``--campaign`` takes the workload of a campaign file instead of the stack's; ``--benchmark
key=value`` sets a key of it, like ``--benchmark output_len=48``).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from statistics import fmean, stdev
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scipy import stats

from sglang_emulator.launcher import start_emulator
from sglang_loadgen import client, contract
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.spec import StackSpec, load_spec
from sglang_stacks.config.stackfile import read_stack_file

ROOT = Path(__file__).resolve().parent.parent
BUSY = "while True: pass"


def spec_of(stack: str, campaign: Path | None, settings: dict[str, Any]) -> StackSpec:
    """The stack's spec with the campaign's workload (if any) and ``settings`` in its benchmark."""
    sections = read_stack_file(stack, ROOT / "stacks").sections
    if campaign is not None:
        campaign_spec = load_campaign(campaign)
        declared = campaign_spec.workload
        if declared is not None:
            written = campaign_spec.workload_keys
            sections["benchmark"] = {k: v for k, v in declared.settings().items() if k in written}
    sections["benchmark"] = dict(sections.get("benchmark") or {}) | settings
    return load_spec(sections, stack)


def one_trial(spec: StackSpec) -> list[float]:
    """A fresh emulator for ``spec``, benchmarked once: the tok/s of each repetition."""
    # The launcher picks a free port; the server listens on 127.0.0.1 only.
    argv = _without(
        _without(render_argv(spec.launch_flags(), spec.environment.sglang_release), "--port"), "--host"
    )
    with (
        tempfile.TemporaryDirectory(prefix="emulator-noise-") as state,
        start_emulator(argv, state_dir=state) as server,
    ):
        workload = contract.Workload.from_settings(server.base_url, spec.benchmark.settings())
        return list(client.run(workload).levels[-1].tok_s_runs)


def measure(spec: StackSpec, trials: int, hosts: int) -> list[list[float]]:
    """Each trial's tok/s runs, ``hosts`` trials at a time."""
    runs: list[list[float]] = []
    while len(runs) < trials:
        batch: list[list[float]] = [[] for _ in range(min(hosts, trials - len(runs)))]

        def run(index: int, into: list[list[float]] = batch) -> None:
            into[index] = one_trial(spec)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(batch))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for values in batch:
            runs.append(values)
            print(
                f"trial {len(runs)}: tok/s per repetition {', '.join(f'{v:.3f}' for v in values)}", flush=True
            )
    return runs


def components(runs: list[list[float]]) -> dict[str, float]:
    """The spread within a trial and between launches, as coefficients of variation in percent."""
    means = [fmean(r) for r in runs]
    grand = fmean(means)
    within_var = fmean(stdev(r) ** 2 for r in runs)
    repetitions = fmean(len(r) for r in runs)
    between_var = max(0.0, stdev(means) ** 2 - within_var / repetitions) if len(means) > 1 else 0.0
    tested = stats.f_oneway(*runs) if len(runs) > 1 else None
    return {
        "mean_tok_s": grand,
        "within_cv_pct": 100 * math.sqrt(within_var) / grand,
        "means_cv_pct": 100 * (stdev(means) / grand if len(means) > 1 else 0.0),
        "between_launch_cv_pct": 100 * math.sqrt(between_var) / grand,
        "launches_differ_p": float(tested.pvalue) if tested is not None else math.nan,
        "spread_of_means_pct": 100 * (max(means) - min(means)) / grand,
    }


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value."""
    if flag not in argv:
        return argv
    at = argv.index(flag)
    return argv[:at] + argv[at + 2 :]


def _setting(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    return key, json.loads(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="baseline-bs128")
    parser.add_argument("--campaign", type=Path, help="take the workload of this campaign file")
    parser.add_argument("--benchmark", type=_setting, action="append", default=[], help="key=value")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=1, help="trials at once, each on its own host")
    parser.add_argument("--stress", type=int, default=0, help="busy processes beside the measurement")
    parser.add_argument("--json", type=Path, help="write the runs and the figures here")
    args = parser.parse_args()
    spec = spec_of(args.stack, args.campaign, dict(args.benchmark))
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.stress)]
    try:
        runs = measure(spec, args.trials, args.hosts)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    figures = components(runs)
    print(
        f"{args.stack}: {len(runs)} trials ({args.hosts} at a time, {args.stress} busy processes beside), "
        f"mean {figures['mean_tok_s']:.3f} tok/s; CV within a trial {figures['within_cv_pct']:.3f} %, "
        f"of the trial means {figures['means_cv_pct']:.3f} %, between launches "
        f"{figures['between_launch_cv_pct']:.3f} % (F test p={figures['launches_differ_p']:.3g}); "
        f"the means spread over {figures['spread_of_means_pct']:.2f} %"
    )
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, **figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
