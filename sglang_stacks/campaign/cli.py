"""``sglang-stacks sweep plan|run|report|promote|dashboard <campaign>``: the campaign commands of
the CLI.

Exit codes (`ExitCode`): OK (dashboard: stopped with Ctrl-C); NOT_WRITTEN (promote); BAD_INPUT;
INTERRUPTED (run): resume with the same command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.plan import Plan, format_plan, make_plan
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import campaign_file, find_project_dir, reports_dir, stacks_dir

__all__ = ["DASHBOARD_PORT", "configure", "run"]

DASHBOARD_PORT = 8080
"""The port ``sweep dashboard`` serves on unless ``--port`` says otherwise (optuna-dashboard's own
default), so the study's address is the same every time."""


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``sweep`` subcommands and their arguments."""
    actions = parser.add_subparsers(dest="sweep_action", required=True, metavar="<action>")
    helps = {
        "plan": "expand the axes and keep or discard each candidate with preflight (no host touched)",
        "run": "run the kept candidates as trial stacks on the pool; resumes where a killed sweep stopped",
        "report": "write reports/<campaign>/report.md with the ranking and its figures",
        "promote": "write the winner's server (and draft model) into a stack file, after showing the diff",
        "dashboard": "serve the campaign's study in optuna-dashboard on 127.0.0.1 until Ctrl-C",
    }
    for action, text in helps.items():
        sub = actions.add_parser(action, help=text, description=text)
        sub.add_argument("campaign", help="a campaign in campaigns/ (seeds) or the path of a campaign file")
        if action == "promote":
            sub.add_argument("--to", default="baseline", help="the stack file to write (default: baseline)")
            sub.add_argument(
                "--trial", help="promote this trial instead of the best (one within noise of it)"
            )
            sub.add_argument("--yes", action="store_true", help="write without asking")
        if action == "run":
            sub.add_argument(
                "--max-trials",
                type=_positive(int),
                metavar="N",
                help="launch at most N trials in all (budget.max_trials of the campaign file, for this run)",
            )
            sub.add_argument(
                "--max-hours",
                type=_positive(float),
                metavar="H",
                help="start no trial after H hours of sweeping, earlier runs' included (budget.max_hours)",
            )
            sub.add_argument(
                "--keep-trial-stacks",
                action="store_true",
                help="keep each trial's stack (empty) in the backend and its file in stacks/, to deploy "
                "it again with `pulumi up -s <trial>`; by default both go once the trial is destroyed",
            )
        if action == "dashboard":
            sub.add_argument(
                "--port",
                type=_port,
                default=DASHBOARD_PORT,
                help=f"the port on 127.0.0.1 (default {DASHBOARD_PORT}, optuna-dashboard's own)",
            )


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argument type: a number of ``kind`` above 0."""
    what = "whole number" if kind is int else "number"

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what} above 0; give one, e.g. 4")
        return value

    return parse


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port; give a number from 1 to 65535")
    return port


def _plan(args: argparse.Namespace, project: Path) -> Plan:
    path = campaign_file(args.campaign, project)
    campaign = load_campaign(path)
    limits = {
        name: value
        for name, value in (
            ("max_trials", getattr(args, "max_trials", None)),
            ("max_hours", getattr(args, "max_hours", None)),
        )
        if value is not None
    }
    if limits:  # as if written in the file's budget, before the plan chooses its strategy by it
        budget = campaign.budget.model_copy(update=limits)
        campaign = campaign.model_copy(update={"budget": budget})
    return make_plan(path.stem, campaign, stacks_dir(project))


def run(args: argparse.Namespace) -> int:
    """Run one ``sweep`` action; its exit code."""
    project = find_project_dir()
    if args.sweep_action == "dashboard":  # the study only: no plan, no preflight
        from sglang_stacks.campaign.dashboard import serve_dashboard

        path = campaign_file(args.campaign, project)
        name = path.stem
        folder = reports_dir(project) / name
        return serve_dashboard(name, load_campaign(path), folder, port=args.port, out=sys.stdout)
    plan = _plan(args, project)
    if args.sweep_action == "plan":
        print(format_plan(plan))
        return ExitCode.OK
    if args.sweep_action == "run":
        from sglang_stacks.campaign.runner import run_sweep  # the Automation API, only to run
        from sglang_stacks.results import history

        return run_sweep(
            plan,
            project=project,
            reports=reports_dir(project),
            db_path=history.default_history_path(),
            out=sys.stdout,
            keep_trial_stacks=args.keep_trial_stacks,
        )
    if args.sweep_action == "report":
        from sglang_stacks.campaign.report import write_report

        path = write_report(plan, reports_dir(project))
        print(f"Wrote {path} and its figures.")
        print(path.read_text(encoding="utf-8").split("## Verdict", 1)[-1].split("## Ranking", 1)[0].strip())
        return ExitCode.OK
    from sglang_stacks.campaign.promote import promote_winner

    return promote_winner(
        plan,
        reports=reports_dir(project),
        stacks_dir=stacks_dir(project),
        target=args.to,
        yes=args.yes,
        out=sys.stdout,
        trial=args.trial,
    )
