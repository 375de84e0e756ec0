"""The companion CLI, for what Pulumi has no verb for: ``sglang-stacks <command>`` (the same as
``python -m sglang_stacks.cli <command>``).

Each subcommand is a ``Command`` in ``COMMANDS``: a name, a one-line help, a function that adds
its arguments and a function that runs it and returns the exit code, one of `ExitCode`
(``sglang_stacks.exits``, which says what each means).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang_stacks.cli_check import configure_check, run_check
from sglang_stacks.cli_config import configure_render, configure_schema, run_render, run_schema
from sglang_stacks.config.spec import load_spec
from sglang_stacks.errors import StacksError
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import find_project_dir, stacks_dir
from sglang_stacks.results import compare, history, plot, promote
from sglang_stacks.results.stats import LAUNCH_CV_PCT, Noise

__all__ = ["COMMANDS", "Command", "main"]


@dataclass(frozen=True)
class Command:
    """One subcommand: ``configure`` adds its arguments, ``run`` does the work and returns the exit code."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _configure_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "stacks", nargs="+", metavar="stack", help="two or more deployed stacks; the first is the reference"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument(
        "--all-flags", action="store_true", help="show every flag, not only those that differ"
    )
    parser.add_argument(
        "--tolerance-pct",
        type=float,
        default=0.0,
        help="exit 1 only when a stack is significantly slower than the first by more than this",
    )
    parser.add_argument(
        "--launch-cv-pct",
        type=_percent,
        default=LAUNCH_CV_PCT,
        help=f"how much one configuration's tok/s moves between launches and hosts, in percent "
        f"(default {LAUNCH_CV_PCT:g}): added to every comparison",
    )
    parser.add_argument(
        "--min-effect-pct",
        type=_percent,
        help="a smaller difference is within noise (default: what the launch floor gives)",
    )


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 100.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage; give a number from 0 to 100")
    return value


def _run_compare(args: argparse.Namespace) -> int:
    if len(args.stacks) < 2:
        print(
            "error: compare needs at least two stacks, e.g. `compare baseline eagle3-bs128`.", file=sys.stderr
        )
        return ExitCode.BAD_INPUT
    from sglang_stacks.drive import automation  # the Automation API, only for the commands that drive Pulumi

    return compare.main_compare(
        args.stacks,
        automation.stack_outputs,
        json_out=args.json,
        all_flags=args.all_flags,
        tolerance_pct=args.tolerance_pct,
        noise=Noise(args.launch_cv_pct, args.min_effect_pct),
    )


def _configure_history(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stacks", nargs="*", metavar="stack", help="only these stacks (default: all)")
    parser.add_argument(
        "--plot", type=Path, metavar="PNG", help="also write a plot of tok/s per stack over time"
    )
    parser.add_argument("--db", type=Path, help="the history file (default: beside the Pulumi state)")


def _run_history(args: argparse.Namespace) -> int:
    db_path = args.db or history.default_history_path()
    found = history.rows(db_path, args.stacks or None)
    if not found:
        which = f" for {', '.join(args.stacks)}" if args.stacks else ""
        print(
            f"No benchmark results are recorded{which} in {db_path} yet; "
            "run `pulumi up -s <stack>` to benchmark one."
        )
        return ExitCode.OK
    print(history.format_table(found))
    if args.plot is not None:
        print(f"\nWrote the tok/s plot to {plot.plot_history(found, args.plot)}.")
    return ExitCode.OK


def _configure_promote(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("winner", help="the stack whose server configuration won")
    parser.add_argument(
        "target", nargs="?", default="baseline", help="the stack file to write (default: baseline)"
    )
    parser.add_argument("--yes", action="store_true", help="write without asking")
    parser.add_argument("--stacks-dir", type=Path, help=argparse.SUPPRESS)


def _run_promote(args: argparse.Namespace) -> int:
    folder = args.stacks_dir or stacks_dir(find_project_dir())
    return promote.promote(args.winner, args.target, yes=args.yes, stacks_dir=folder, out=sys.stdout)


def _configure_rollout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", help="the stack to deploy: `pulumi up -s <stack>` in the project folder")


def _run_rollout(args: argparse.Namespace) -> int:
    from sglang_stacks.drive.rollout import (
        rollout,  # the Automation API, only for the commands that drive Pulumi
    )

    # The benchmark step records where the environment says, so the rollout reads the same file.
    return rollout(args.stack, db_path=history.default_history_path())


def _configure_recover(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", help="a stack whose update was interrupted (killed, Ctrl-C twice)")


def _run_recover(args: argparse.Namespace) -> int:
    from sglang_stacks.drive import recover  # the Automation API's CLI and the providers, only here

    return recover.recover(args.stack)


def _configure_logs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", help="a stack: its host comes from its file, and its key from its state")
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new lines, also of a server launched after this started (Ctrl-C stops)",
    )
    parser.add_argument("-n", "--lines", type=int, default=40, help="lines of each file to show first")


def _run_logs(args: argparse.Namespace) -> int:
    from sglang_stacks.components._benchmark_run import progress_path
    from sglang_stacks.components._host_parts import server_log_dir
    from sglang_stacks.drive import automation  # the Automation API, only for the commands that drive Pulumi
    from sglang_stacks.hostops import logs
    from sglang_stacks.hostops.connection import Connection

    config = automation.stack_config(args.stack)
    spec = load_spec(config, args.stack)
    host = spec.host
    if host.cluster is not None:  # a cluster's pods' logs, through the Kubernetes client
        from sglang_stacks.kube.logs import print_logs

        print_logs(host.cluster, args.stack, following=args.follow, lines=args.lines)
        return ExitCode.OK
    conn = Connection.for_host(host, config.get("sglang-stacks:sshPrivateKey"))
    found = logs.StackLogs(args.stack, server_log_dir(spec), progress_path(host.state_dir, args.stack))
    if args.follow:
        logs.follow(conn, found, lambda line: print(line, flush=True), args.lines)
    else:
        print("\n".join(logs.show(conn, found, args.lines)))
    return ExitCode.OK


def _configure_sweep(parser: argparse.ArgumentParser) -> None:
    from sglang_stacks.campaign import cli as sweep_cli

    sweep_cli.configure(parser)


def _run_sweep(args: argparse.Namespace) -> int:
    from sglang_stacks.campaign import cli as sweep_cli

    return sweep_cli.run(args)


COMMANDS: dict[str, Command] = {
    "check": Command(
        name="check",
        help="check the setup (Pulumi CLI, backend, passphrase) and a stack (spec, preflight, host)",
        configure=configure_check,
        run=run_check,
    ),
    "compare": Command(
        name="compare",
        help="compare deployed stacks: flags side by side, metrics with change and significance, a verdict",
        configure=_configure_compare,
        run=_run_compare,
    ),
    "history": Command(
        name="history",
        help="print every recorded benchmark result, and plot tok/s per stack over time",
        configure=_configure_history,
        run=_run_history,
    ),
    "logs": Command(
        name="logs",
        help="show (-f: follow) a stack's server log and benchmark progress (on a cluster: its pods' logs)",
        configure=_configure_logs,
        run=_run_logs,
    ),
    "promote": Command(
        name="promote",
        help="copy a winning stack's server configuration into another stack's file (default: baseline)",
        configure=_configure_promote,
        run=_run_promote,
    ),
    "recover": Command(
        name="recover",
        help="settle what an interrupted update left (pending operations, its lock); say what is left",
        configure=_configure_recover,
        run=_run_recover,
    ),
    "render": Command(
        name="render",
        help="print a stack's launch command, memory plan and preflight findings, without deploying",
        configure=configure_render,
        run=run_render,
    ),
    "rollout": Command(
        name="rollout",
        help="deploy a stack; a failed hand_back gate redeploys its baseline; a bad canary rolls back",
        configure=_configure_rollout,
        run=_run_rollout,
    ),
    "schema": Command(
        name="schema",
        help="print the JSON Schema of a stack's sections (stacks/schema.json)",
        configure=configure_schema,
        run=run_schema,
    ),
    "sweep": Command(
        name="sweep",
        help="campaigns: plan a search space, run it on a pool of hosts, rank, report, promote the winner",
        configure=_configure_sweep,
        run=_run_sweep,
    ),
}
"""Every subcommand by name; add a Command here to add a subcommand."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglang-stacks",
        description="sglang-stacks companion: what Pulumi has no verb for.",
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    for command in COMMANDS.values():
        sub = subcommands.add_parser(command.name, help=command.help, description=command.help)
        command.configure(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else ExitCode.BAD_INPUT
    try:
        return COMMANDS[args.command].run(args)
    except StacksError as error:
        print(f"error: {error}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except BrokenPipeError:
        # The reader has what it wanted (`render ... | head`); the rest goes nowhere, quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
