"""``sweep report``: the Markdown report of a campaign (``reports/<campaign>/report.md``), read from
its study: what the search spent and the launches it avoided, the ranking table (by the first
objective), the Pareto front of several objectives, trials that missed an SLO, failed trials, the
plan's discards, and the figures beside it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import optuna

from sglang_stacks.campaign.attributes import TrialRecord, read_study_attributes, records
from sglang_stacks.campaign.figures import draw_all
from sglang_stacks.campaign.legacy import import_sweep_file
from sglang_stacks.campaign.objective import describe
from sglang_stacks.campaign.plan import Plan
from sglang_stacks.campaign.rank import Ranking, rank
from sglang_stacks.campaign.search import Search
from sglang_stacks.causes import cause_text

__all__ = ["REPORT_FILE", "load_ranking", "load_records", "search_summary", "write_report"]

REPORT_FILE = "report.md"


def _study(plan: Plan, reports: Path) -> optuna.Study:
    """The campaign's study (``reports/<campaign>/`` or its ``storage``), the previous release's
    sweep file imported first."""
    search = Search.open(plan, reports / plan.name)
    import_sweep_file(search, reports / plan.name, settle=None)
    return search.study


def load_records(plan: Plan, reports: Path) -> list[TrialRecord]:
    """Every trial of the campaign's study."""
    return records(_study(plan, reports))


def load_ranking(plan: Plan, reports: Path) -> Ranking:
    """The ranking of the campaign's trials, by its (first) objective."""
    return rank(plan.campaign.goals[0], load_records(plan, reports), plan.campaign.noise.noise())


def search_summary(found: list[TrialRecord]) -> str:
    """What the search spent and what it did not launch, in one sentence."""
    launched = [r for r in found if r.launched]
    hours = sum(r.gpu_hours or 0.0 for r in launched)
    discarded = sum(r.status == "infeasible" for r in found)
    repeated = sum(r.status == "duplicate" for r in found)
    interrupted = sum(
        r.status == "interrupted" or (r.state == "FAIL" and r.status != "duplicate") for r in found
    )
    return (
        f"{len(launched)} trials launched ({hours:.2f} GPU-hours); launches avoided: {discarded} suggestions "
        f"discarded by preflight and the memory planner, {repeated} repeated suggestions answered from "
        f"earlier trials" + (f"; {interrupted} trials interrupted and settled" if interrupted else "") + "."
    )


def _table(ranking: Ranking) -> list[str]:
    titles = list(ranking.trials[0].labels) if ranking.trials else []
    head = [
        "#",
        "stack",
        *(t.split(".")[-1] for t in titles),
        "mean",
        "95 % interval",
        "vs best",
        "p",
        "verdict",
        "TTFT p50 ms",
        "TPOT p50 ms",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in ranking.trials:
        verdict = "best" if t.rank == 1 else ("within noise" if t.within_noise else "significantly worse")
        if t.stopped_early:
            verdict += ", stopped early"
        p = "" if t.p_value is None else ("<0.001" if t.p_value < 0.001 else f"{t.p_value:.3f}")
        cells = [
            str(t.rank),
            f"`{t.stack}`",
            *t.labels.values(),
            f"{t.mean:.1f}",
            f"{t.ci95[0]:.1f} to {t.ci95[1]:.1f}",
            f"{t.change_pct:+.1f} %",
            p,
            verdict,
            "" if t.ttft_p50_ms is None else f"{t.ttft_p50_ms:.0f}",
            "" if t.tpot_p50_ms is None else f"{t.tpot_p50_ms:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _pareto(plan: Plan, study: optuna.Study, found: list[TrialRecord]) -> list[str]:
    """With several objectives: the trials on their Pareto front (Optuna's ``best_trials``: every
    SLO met, and no such trial better on one objective without being worse on another)."""
    goals = plan.campaign.goals
    if len(goals) < 2:
        return []
    on_front = {trial.number for trial in study.best_trials}
    front = [r for r in found if r.number in on_front and r.status != "duplicate" and r.values]
    first = goals[0]
    front.sort(key=lambda r: (r.values or (0.0,))[0], reverse=first.goal == "maximize")
    titles = list(front[0].labels) if front else []
    head = ["stack", *(t.split(".")[-1] for t in titles), *(describe(goal) for goal in goals)]
    lines = [
        "## Pareto front",
        "",
        f"{len(front)} trial(s) no feasible trial beats on every objective at once: each is the best "
        "choice for some trade-off between them; `sglang-stacks sweep promote "
        f"{plan.name} --trial <stack> --to <stack>` promotes one.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in front:
        cells = [f"`{r.stack}`", *r.labels.values(), *(f"{value:.1f}" for value in r.values or ())]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _significance(ranking: Ranking) -> str:
    noise = ranking.noise
    return (
        "Significance: Welch's t-test against the best over the repetitions, p < 0.05, with "
        f"{noise.launch_cv_pct:g} % between launches and hosts added to each mean; a difference under "
        f"{noise.margin_pct:.1f} % is within noise whatever its p (campaign `noise`)."
    )


def _candidates(plan: Plan, discarded: int) -> str:
    """How many candidates the plan listed and kept, or why it listed none."""
    if not plan.listed:
        count = "No end of" if plan.size is None else f"{plan.size}"
        return f"{count} candidates, too many to list: preflight judged each suggestion before its launch"
    kept = len(plan.kept())
    return f"{len(plan.rows)} candidates, {kept} kept by the plan, {discarded} discarded before any launch"


def write_report(plan: Plan, reports: Path) -> Path:
    """Write the report and its figures into ``reports/<campaign>/``; the report's path."""
    folder = reports / plan.name
    study = _study(plan, reports)
    found = records(study)
    # What the runs searched with, as they said it; the plan's own for a study that never ran.
    strategy = read_study_attributes(study).strategy or plan.strategy
    ranking = rank(plan.campaign.goals[0], found, plan.campaign.noise.noise())
    figures = draw_all(ranking, found, folder) if ranking.trials else {}
    discarded = [row for row in plan.rows if row.verdict == "discarded"]
    reasons = Counter(reason.split(":", 1)[0] for row in discarded for reason in row.reasons)
    lines = [
        f"# Campaign {plan.name}",
        "",
        plan.campaign.description,
        "",
        f"Objective: {'; '.join(describe(goal) for goal in plan.campaign.goals)}"
        + "".join(f", subject to {c.name}" for c in plan.campaign.subject_to)
        + f". {_candidates(plan, len(discarded))}; {len(ranking.trials)} trials measured, "
        f"{len(ranking.failed)} failed. {_significance(ranking)}",
        "",
        f"Search: {strategy}"
        + ("" if strategy == "grid" else f" (seed {plan.campaign.search.seed})")
        + f". {search_summary(found)}",
        "",
        "## Verdict",
        "",
        ranking.verdict(),
        "",
        "## Ranking",
        "",
        *(
            [f"By the first objective ({describe(ranking.objective)}); the Pareto front of all follows.", ""]
            if len(plan.campaign.goals) > 1
            else []
        ),
        *_table(ranking),
        "",
        *_pareto(plan, study, found),
    ]
    for name, title in (
        ("objective", "Objective per trial"),
        ("pareto", "tok/s per GPU against tok/s per user, a line per configuration, the Pareto frontier"),
        ("history", "Search history: the objective by trial number and the best so far"),
        ("axes", "Per-axis effect"),
    ):
        if name in figures:
            lines += [f"![{title}]({figures[name].name})", ""]
    stopped = [t for t in ranking.trials if t.stopped_early]
    if stopped:
        lines += ["## Stopped early", ""]
        lines += [f"- `{t.stack}` ({', '.join(t.labels.values())}): {t.stopped_early}." for t in stopped]
        lines.append("")
    if ranking.missed_slo:
        lines += ["## Missed an SLO", "", "Measured, but infeasible: never the winner.", ""]
        lines += [
            f"- `{r.stack}` ({', '.join(r.labels.values())}): {'; '.join(r.violations)}."
            for r in ranking.missed_slo
        ]
        lines.append("")
    if ranking.failed:
        lines += ["## Failed trials", "", "| stack | cause | message |", "|---|---|---|"]
        lines += [
            f"| `{r.stack}` | {cause_text(r.cause)} | {(r.message or '').replace('|', '/')[:200]} |"
            for r in ranking.failed
        ]
        lines.append("")
    if discarded:
        lines += ["## Discarded by the plan", ""]
        lines += [f"- {count} x `{code}`" for code, count in reasons.most_common()]
        lines.append("")
    path = folder / REPORT_FILE
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
