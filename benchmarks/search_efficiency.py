"""GPU time until a campaign's search finds the best configuration: ours against fair baselines.

For each space (the seeds' campaign, ``campaigns/seeds.yaml``; a large one,
``benchmarks/search-large.yaml``; and two at serving loads where memory and the KV pool matter,
``benchmarks/search-32-short.yaml`` and ``benchmarks/search-64-long.yaml``) every candidate is
planned by the project's own planner and worked out on the emulator in virtual time
(``search_space``), and every strategy (``search_strategies``: grid in random orders, random, plain
TPE, TPE with preflight, multivariate TPE, and ours; grid in file order shown apart) runs with
``--seeds`` seeds at each noise level (``search_space.Noise``: a term between launches and one
between repetitions), on an emulated host that charges each trial's GPU time (``search_host``).

Per strategy and seed: launches and GPU-hours until the first fully measured trial of a candidate in
the optimum's noise band, and the final pick once the budget is spent (``--budget-pct`` of the kept
candidates' GPU time, at most ``--budget-launches`` average launches' worth): the candidate with the
best mean over its fully measured trials' repetitions (every strategy by the same rule), and whether
it is in the band. A run stops once it spent the kept
candidates' GPU time, ran out of candidates, or both found the band and reached the budget.

Run: ``python benchmarks/search_efficiency.py [--seeds 20] [--quick] [--markdown docs/search-efficiency.md]
[--json results.json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from dataclasses import asdict
from pathlib import Path

import optuna
from search_runs import STRATEGIES, Budget, run_all
from search_space import ROOT, Noise, Space, load_space
from search_strategies import RUNNERS
from search_tables import Comparison, Summary, compare, markdown, summarize, table

__all__ = ["main"]

SPACES = {
    "seeds": (ROOT / "campaigns" / "seeds.yaml", 0.00099),
    "large": (ROOT / "benchmarks" / "search-large.yaml", 0.0024),
    "32-short": (ROOT / "benchmarks" / "search-32-short.yaml", 0.0024),
    "64-long": (ROOT / "benchmarks" / "search-64-long.yaml", 0.0024),
}
"""Each space's campaign file and the coefficient of variation of a repetition's tok/s within one
trial on the emulator at its workload, measured by ``benchmarks/emulator_noise.py`` (the real
emulator over HTTP, the project's load generator, 3 trials of a fresh server each; docs/campaigns.md
gives the runs)."""


def parse_noise(text: str, space: Space) -> Noise:
    """``default`` (the space's), ``B`` (between-launch CV B %, within the default) or ``B/W`` (both, %)."""
    default = space.default_noise()
    if text == "default":
        return default
    between, _, within = text.partition("/")
    try:
        return Noise(
            f"{text} %",
            float(within) / 100 if within else default.within_cv,
            float(between) / 100,
        )
    except ValueError:
        raise SystemExit(
            f"--noise {text}: each level is 'default', a between-launch CV in percent (1), or "
            "between/within in percent (1/0.2)."
        ) from None


def describe(space: Space, noise: Noise) -> str:
    """The space at a noise level in one paragraph: its size, what preflight keeps, the optimum and
    its band."""
    kept = space.kept
    best = [c for c in space.candidates if space.is_optimum(c)]
    band = space.band(noise)
    failing = sum(c.truth.failure is not None for c in space.candidates)
    kept_failing = sum(c.truth.failure is not None for c in kept)
    return (
        f"{len(space.candidates)} candidates, {len(kept)} kept by preflight "
        f"({space.kept_gpu_s / 3600:.1f} GPU-h to run them all, {space.mean_trial_gpu_s / 3600:.2f} GPU-h "
        f"a trial on average); {failing} fail on the emulator, "
        f"{kept_failing} of them kept. Optimum {space.optimum:.2f} tok/s at "
        f"concurrency {space.concurrency} ({len(best)} candidates, e.g. {', '.join(best[0].labels)}). "
        f"Noise {noise.describe()}: band {100 * noise.band_fraction(space.repetitions):.2f} % "
        f"({space.repetitions} repetitions), {len(band)} candidates, "
        f"{sum(space.candidates[i].kept for i in band)} kept."
    )


def _finite(value: object) -> object:
    """``value`` with every infinite number (a band never found) as null, for standard JSON."""
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per strategy (default 20; 3 with --quick)"
    )
    parser.add_argument("--quick", action="store_true", help="the seeds' space at its default noise, 3 seeds")
    parser.add_argument("--spaces", default=None, help=f"comma-separated, of {', '.join(SPACES)}")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument(
        "--noise",
        default=None,
        help="comma-separated noise levels: 'default' (within a trial the emulator's measured CV, between "
        "launches SGLang's public figure at the objective's concurrency), a between-launch CV in percent "
        "('1'), or between/within in percent ('1/0.2'); default: default,1,2",
    )
    parser.add_argument(
        "--budget-pct", type=float, default=25.0, help="%% of the kept GPU time spent before the final pick"
    )
    parser.add_argument(
        "--budget-launches",
        type=float,
        default=50.0,
        help="the final pick's budget at most this many average launches",
    )
    parser.add_argument("--markdown", type=Path, help="write the tables here")
    parser.add_argument("--json", type=Path, help="write every run's result here")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)"
    )
    args = parser.parse_args(argv)
    seeds = args.seeds or (3 if args.quick else 20)
    names = (args.spaces or ("seeds" if args.quick else ",".join(SPACES))).split(",")
    levels = (args.noise or ("default" if args.quick else "default,1,2")).split(",")
    strategies = args.strategies.split(",")
    for name in (n for n in names if n not in SPACES):
        raise SystemExit(f"--spaces {name}: no such space; the spaces are {', '.join(SPACES)}.")
    for name in (n for n in strategies if n not in RUNNERS):
        raise SystemExit(f"--strategies {name}: no such strategy; the strategies are {', '.join(RUNNERS)}.")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = time.monotonic()
    spaces = []
    for name in names:
        begun = time.monotonic()
        space, cached = load_space(name, SPACES[name][0], SPACES[name][1], args.jobs)
        how = "read from the cache" if cached else "worked out"
        print(
            f"{name}: {len(space.candidates)} candidates {how} in {time.monotonic() - begun:.0f} s",
            flush=True,
        )
        spaces.append(space)
    noises = {s.name: [parse_noise(level, s) for level in levels] for s in spaces}
    budget = Budget(args.budget_pct, args.budget_launches)
    results = run_all(spaces, noises, strategies, seeds, budget, args.jobs)
    report: dict[str, object] = {"seeds": seeds, "budget": asdict(budget), "spaces": {}}
    sections: list[tuple[Space, Noise, str, list[Summary], Comparison | None]] = []
    for space in spaces:
        entry: dict[str, object] = {
            "candidates": len(space.candidates),
            "kept": len(space.kept),
            "kept_gpu_h": space.kept_gpu_s / 3600,
            "mean_trial_gpu_h": space.mean_trial_gpu_s / 3600,
            "budget_gpu_h": budget.seconds(space) / 3600,
            "optimum_tok_s": space.optimum,
            "noise": {},
        }
        for noise in noises[space.name]:
            runs = [r for r in results[space.name] if r.noise == noise.name]
            summaries = [summarize(space, s, [r for r in runs if r.strategy == s]) for s in strategies]
            comparison = compare(space, summaries)
            text = describe(space, noise)
            print(f"\n{space.name}, noise {noise.name}: {text}\n{table(summaries, comparison)}", flush=True)
            if comparison is not None:
                print(comparison.sentence())
            sections.append((space, noise, text, summaries, comparison))
            band = space.band(noise)
            entry["noise"][noise.name] = {  # type: ignore[index]
                "within_cv": noise.within_cv,
                "between_cv": noise.between_cv,
                "band_fraction": noise.band_fraction(space.repetitions),
                "band": sorted(space.candidates[i].stack for i in band),
                "summaries": {s.strategy: asdict(s) for s in summaries},
                "comparison": asdict(comparison) if comparison else None,
                "runs": [asdict(r) for r in runs],
            }
        entry["kept_in_order"] = [
            {"stack": c.stack, "labels": c.labels, "gpu_h": c.gpu_s / 3600, "tok_s": c.value}
            for c in space.kept
        ]
        report["spaces"][space.name] = entry  # type: ignore[index]
    elapsed = time.monotonic() - started
    cpu = (
        resource.getrusage(resource.RUSAGE_SELF).ru_utime
        + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    )
    print(f"\n{elapsed:.0f} s ({cpu:.0f} s of CPU) on {args.jobs} processes")
    command = " ".join(
        ["python benchmarks/search_efficiency.py", *(argv if argv is not None else sys.argv[1:])]
    )
    if args.markdown:
        args.markdown.write_text(markdown(sections, seeds, budget.describe(), command, elapsed, cpu))
    if args.json:
        args.json.write_text(json.dumps(_finite(report), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
