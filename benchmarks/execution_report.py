"""The project's rules against each release's own code, run from its wheel (``sglang_world.execute``).

Two reports, for ``docs/preflight.md``:

- ``--stacks``: every shipped stack on 0.5.8 and 0.5.23, planned by the project's rules (its
  ``model.config`` left out) and by the release's own code: fraction, KV cache, verdict.
- ``--grid``: how often the rules give what the release's code resolves (automatic fraction, chunk,
  captured sizes, running limit; from 0.5.11 the KV budget, and the pool in tokens that budget
  holds by the plan's per-token cell against the release's own pool sizing) on launches drawn from ``SPACE``
  (the public models the project carries: Kimi-K2.5, DeepSeek-V3, Llama-3.1-8B, Qwen3-30B-A3B;
  parallelism, drafts, graphs, chunk, KV dtype and page size, all-to-all, running limit), each
  release in one child (0.5.8 and 0.5.23, or ``--releases``).

Run: ``. .venv/sglang-stacks.env && python benchmarks/execution_report.py --stacks --grid``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_flags import load_table
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.plan import make_plan
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_world import DeviceFacts, Launch, ModelFacts, ModelKind, resolve_settings
from sglang_world.budget import free_at_start_gib, pool_tokens
from sglang_world.execute import Machine, Question, execute, measured
from sglang_world.launch import launch_from_argv
from sglang_world.models import PUBLIC_MODELS, config_kv_cell, public_model

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ("0.5.8", "0.5.23")
_VISION = {"kimi-k2.5": (27, 1152)}
_MLA = {"kimi-k2.5", "deepseek-v3"}


def _pinned(spec: StackSpec, release: str, config: str | None) -> StackSpec:
    environment = spec.environment.model_copy(update={"sglang_release": release})
    model = spec.model.model_copy(update={"config": config})
    return spec.model_copy(update={"environment": environment, "model": model})


def _cell(spec: StackSpec, release: str, config: str | None) -> str:
    plan = plan_memory(_pinned(spec, release, config))
    if plan.failure_phase == "launch":
        return f"refused: {(plan.failure or '').split(':', 1)[0]}"
    if plan.mem_fraction_static is None:
        return "not judged"
    kv = f"{plan.kv_cache_gb:.2f} GB" if plan.kv_cache_gb is not None else "?"
    if plan.failure_phase == "kv_pool" and plan.pool_from is not None:
        kv = "none (its pool code refuses)"
    verdict = {"fits": "fits", "does_not_fit": "does not fit", "unknown": "not judged"}[plan.verdict]
    return f"{plan.mem_fraction_static:.4f} ({plan.fraction_source}), KV {kv}, {verdict}"


def stacks_report() -> None:
    print("| stack | release | the project's rules | the release's own code |")
    print("| --- | --- | --- | --- |")
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        name = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        spec = load_stack_spec(name, ROOT / "stacks")
        spec = spec.for_host(0) if spec.fleet is not None and spec.fleet.hosts else spec
        for release in RELEASES:
            before, after = _cell(spec, release, None), _cell(spec, release, spec.model.config)
            print(f"| `{name}` | {release} | {before} | {after} |")


def campaigns_report() -> None:
    """Every candidate of every shipped campaign, at its pinned release and at 0.5.23, planned by the
    project's rules (its model's config left out) and by the release's own code: how often the
    fraction, the pool in tokens and the verdict are equal, and how many the release's code judged
    (a release without the model's class keeps the rules: the seeds' Kimi-K2.5 on 0.5.8)."""
    print(
        "| campaign | release | candidates | judged by the release's code | fraction equal | pool equal "
        "| verdict equal |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for path in sorted((ROOT / "campaigns").glob("*.yaml")):
        rows = [r.spec for r in make_plan(path.stem, load_campaign(path), ROOT / "stacks").rows if r.spec]
        for pinned in (None, RELEASES[-1]):
            counts = Counter[str]()
            for spec in rows:
                release = pinned or spec.environment.sglang_release
                rules = plan_memory(_pinned(spec, release, None))
                code = plan_memory(_pinned(spec, release, spec.model.config))
                counts["code"] += (code.settings_from or "").startswith(f"SGLang {release}'s own code")
                ours, theirs = rules.mem_fraction_static, code.mem_fraction_static
                counts["fraction"] += ours == theirs or (
                    ours is not None and theirs is not None and abs(ours - theirs) < 5e-4
                )
                counts["tokens"] += rules.max_total_num_tokens == code.max_total_num_tokens
                counts["verdict"] += rules.verdict == code.verdict
            n, said = len(rows), pinned or "pinned"
            print(
                f"| `{path.stem}` | {said} | {n} | {counts['code']} | {counts['fraction']} | "
                f"{counts['tokens']} | {counts['verdict']} |"
            )


SPACE: dict[str, tuple[Any, ...]] = {
    "model": tuple(PUBLIC_MODELS),
    "gpu": (81559, 97887, 143771),
    "tp": (1, 2, 4, 8),
    "pp": (1, 2),
    "speculative": (None, "EAGLE", "EAGLE3"),
    "graphs": (None, 128),
    "chunk": (None, 8192),
    "kv_dtype": ("auto", "fp8_e4m3"),
    "attention_dp": (False, True),
    "a2a": ("none", "deepep", "flashinfer"),
    "page": (1, 64),
    "running": (None, 64),
}
"""What users vary: the public models, GPUs, parallelism (tensor, pipeline, attention DP), the
speculative draft, CUDA graphs, chunked prefill, the KV cache's dtype and page size, the MoE
all-to-all backend and the running limit: 165,888 launches, sampled."""


def _grid(release: str, sample: int, seed: int) -> list[tuple[list[str], str]]:
    options = {o for flag in load_table(release).flags for o in flag.flags}
    graphs_flag = (
        "--cuda-graph-max-bs-decode" if "--cuda-graph-max-bs-decode" in options else "--cuda-graph-max-bs"
    )
    every = list(itertools.product(*SPACE.values()))
    points = []
    for choice in random.Random(seed).sample(every, sample):
        model, gpu, tp, pp, spec, graphs, chunk, dtype, dp, a2a, page, running = choice
        if (dp and tp == 1) or (a2a != "none" and "moe" not in model and model != "deepseek-v3"):
            continue
        argv = ["--model-path", f"/models/{model}", "--tp-size", str(tp), "--kv-cache-dtype", dtype]
        argv += ["--pp-size", str(pp)] if pp > 1 else []
        argv += [graphs_flag, str(graphs)] if graphs else []
        argv += ["--chunked-prefill-size", str(chunk)] if chunk else []
        argv += ["--enable-dp-attention", "--dp-size", str(tp)] if dp else []
        argv += ["--moe-a2a-backend", a2a, "--ep-size", str(tp)] if a2a != "none" else []
        argv += ["--page-size", str(page)] if page > 1 else []
        argv += ["--max-running-requests", str(running)] if running else []
        if spec:
            argv += ["--speculative-algorithm", spec, "--speculative-draft-model-path", "/models/draft"]
            argv += ["--speculative-num-steps", "2", "--speculative-eagle-topk", "4"]
            argv += ["--speculative-num-draft-tokens", "4"]
        points.append((argv, f"{model}@{gpu}"))
    return points


def _plan_cell(model: str, launch: Launch, draft_layers: int | None) -> int | None:
    """The plan's per-token cell for a public model (the cell its ``config.json`` gives; a pipeline's
    largest stage's), an EAGLE draft's layers of the same shape inside it."""
    whole = config_kv_cell(public_model(model))
    assert whole is not None
    cell = whole.stage(launch.pp_size)  # a pipeline's pool is its largest stage's
    target = cell.bytes_per_token(launch.tp_size // launch.attn_dp_size, launch.kv_cache_dtype)
    if target is None or not draft_layers:
        return target
    return target + int(target * draft_layers / cell.layers)


def grid_report(sample: int, seed: int, releases: tuple[str, ...] = RELEASES) -> None:
    for release in releases:
        started = time.monotonic()
        points = _grid(release, sample, seed)
        questions, launches = [], []
        unparsed = 0
        for argv, where in points:
            model, gpu = where.split("@")
            try:
                with contextlib.redirect_stderr(io.StringIO()):  # the parser's usage text
                    launch = launch_from_argv(release, argv)
            except SystemExit:  # the release's parser refuses a flag (0.5.8 has no flashinfer a2a)
                unparsed += 1
                continue
            weights = 0.55 * int(gpu) / 1024  # a model that leaves a KV cache at the usual fractions
            device, facts = DeviceFacts(total_mib=int(gpu)), ModelFacts(weights_gib=weights)
            machine = Machine(int(gpu), 8, "NVIDIA H100 80GB HBM3", (9, 0))
            draft = 1 if "--speculative-draft-model-path" in argv else None  # a one-layer EAGLE head
            memory = measured(launch, facts, device)
            # The head's weights are left out of the model's (none), as of its measurement.
            drafted = 0.0 if draft else None
            questions.append(Question(tuple(argv), public_model(model), machine, (), memory, draft, drafted))
            launches.append((launch, model, gpu, device, weights, draft))
        answers = execute(release, questions)
        equal = {"settings": 0, "kv budget": 0, "kv tokens": 0}
        judged = {"settings": 0, "kv budget": 0, "kv tokens": 0}
        refused: Counter[str] = Counter()
        differ: Counter[str] = Counter()
        for (launch, model, gpu, device, weights, draft), answer in zip(launches, answers, strict=True):
            if answer.settings is None or answer.refusal is not None:
                refused[f"{model}: {(answer.refusal or answer.not_run or '')[:90]}"] += 1
                continue
            kind = ModelKind(mla=model in _MLA, vision=_VISION.get(model))
            ours = resolve_settings(release, launch, int(gpu), kind)
            theirs = answer.settings
            judged["settings"] += 1
            if (
                ours is not None
                and ours.refusal is None
                and (
                    abs(ours.mem_fraction_static - theirs.mem_fraction_static) < 5e-4
                    and ours.chunked_prefill_size == theirs.chunked_prefill_size
                    and ours.max_running_requests == theirs.max_running_requests
                    and tuple(ours.cuda_graph_bs) == tuple(theirs.cuda_graph_bs)
                )
            ):
                equal["settings"] += 1
            if theirs.kv_budget_gib is not None:
                judged["kv budget"] += 1
                rules_budget = theirs.mem_fraction_static * free_at_start_gib(device) - weights
                equal["kv budget"] += abs(rules_budget - theirs.kv_budget_gib) < 0.005
            if theirs.kv_tokens is not None and theirs.kv_budget_gib is not None:
                judged["kv tokens"] += 1
                in_pool = None if theirs.draft_after_pool else draft  # to 0.5.13 the draft's KV is not in it
                ours_tokens = pool_tokens(theirs.kv_budget_gib, _plan_cell(model, launch, in_pool), launch)
                same = ours_tokens == theirs.kv_tokens
                equal["kv tokens"] += same
                if not same:
                    shape = f"tp {launch.tp_size}, attn dp {launch.attn_dp_size}, kv {launch.kv_cache_dtype}"
                    differ[f"{model}, {shape}: plan {ours_tokens}, release {theirs.kv_tokens}"] += 1
        took = time.monotonic() - started
        print(
            f"SGLang {release}: {len(points)} launches in {took:.0f} s, {unparsed} refused by its parser, "
            f"{sum(refused.values())} by its code or not resolved:"
        )
        for why, count in refused.most_common():
            print(f"  {count} x {why}")
        for check in equal:
            print(f"  {check}: the rules equal the release's code on {equal[check]} of {judged[check]}")
        by_model = Counter({what.split(",")[0]: 0 for what in differ})
        for what, count in differ.items():
            by_model[what.split(",")[0]] += count
        if by_model:
            print(
                "    the pools that differ, by model: "
                + ", ".join(f"{m} {n}" for m, n in by_model.most_common())
            )
        for what, count in differ.most_common(8):
            print(f"    {count} x {what}")


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--stacks", action="store_true", help="every shipped stack, rules against code")
    cli.add_argument("--grid", action="store_true", help="how often the rules equal the code")
    cli.add_argument("--campaigns", action="store_true", help="every shipped campaign's candidates")
    cli.add_argument("--sample", type=int, default=3000, help="launches drawn from the space (default 3000)")
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument(
        "--releases", nargs="+", default=RELEASES, help=f"the grid's releases (default {RELEASES})"
    )
    args = cli.parse_args()
    if args.stacks or not (args.grid or args.campaigns):
        stacks_report()
    if args.campaigns:
        campaigns_report()
    if args.grid:
        grid_report(args.sample, args.seed, tuple(args.releases))


if __name__ == "__main__":
    main()
