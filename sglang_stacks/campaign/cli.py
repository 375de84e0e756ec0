"""``sglang-stacks sweep plan|run|report|promote|dashboard <campaign>``: the campaign commands of
the CLI.

Exit codes (`ExitCode`): OK (dashboard: stopped with Ctrl-C); NOT_WRITTEN (promote); BAD_INPUT;
INTERRUPTED (run): resume with the same command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.plan import Plan, format_plan, plan_campaign
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import campaign_file, find_project_dir, reports_dir, stacks_dir

__all__ = ["configure", "run"]


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
        if action == "dashboard":
            sub.add_argument(
                "--port", type=_port, default=0, help="the port on 127.0.0.1 (default: a free one)"
            )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port; give a number from 1 to 65535")
    return port


def _plan(args: argparse.Namespace, project: Path) -> Plan:
    return plan_campaign(campaign_file(args.campaign, project), stacks_dir(project))


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

        print(format_plan(plan).rsplit("\n", 1)[-1], flush=True)
        return run_sweep(
            plan,
            project=project,
            reports=reports_dir(project),
            db_path=history.default_history_path(),
            out=sys.stdout,
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
