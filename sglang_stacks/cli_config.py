"""The companion CLI's configuration commands: ``render`` (a stack's launch command, memory plan
and preflight findings for a release, without deploying) and ``schema`` (the stack spec's JSON
Schema)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sglang_stacks.cli_facts import RenderedFacts, cluster_render, declared_facts
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.memory_text import explain
from sglang_stacks.config.preflight import Finding, run_preflight
from sglang_stacks.config.render import render_argv, render_command
from sglang_stacks.config.spec import StackSpec, load_spec, spec_json_schema
from sglang_stacks.config.stackfile import read_stack_file
from sglang_stacks.errors import FlagError
from sglang_stacks.exits import ExitCode
from sglang_stacks.project import find_project_dir, stacks_dir

__all__ = ["configure_render", "configure_schema", "run_render", "run_schema"]


def configure_render(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", help="stack name: reads stacks/Pulumi.<stack>.yaml")
    parser.add_argument(
        "--release", help="SGLang release to render for (default: the stack's sglang_release)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument(
        "--host",
        type=int,
        default=0,
        help="a fleet's host (or replica, on a cluster) to render, by index (default 0; multi-node: rank 0)",
    )
    parser.add_argument(
        "--role",
        choices=("prefill", "decode"),
        help="a disaggregated fleet's role to render: its first host of that role (instead of --host)",
    )
    parser.add_argument("--stacks-dir", type=Path, help=argparse.SUPPRESS)


def _role_host(spec: StackSpec, role: str | None, host: int) -> int | str:
    """The host index ``--role`` picks (its first host of that role), ``host`` without one, or a
    sentence saying why the stack has no such host."""
    if role is None:
        return host
    roles = spec.fleet.roles() if spec.fleet is not None else []
    found = next((i for i, given in enumerate(roles) if given == role), None)
    if found is None:
        return f"--role {role}: the stack has no fleet host with role: {role} (fleet.disaggregation)."
    return found


def run_render(args: argparse.Namespace) -> int:
    stack_file = read_stack_file(args.stack, args.stacks_dir or stacks_dir(find_project_dir()))
    spec = load_spec(stack_file.sections, args.stack)
    picked = _role_host(spec, args.role, args.host)
    if isinstance(picked, str):
        print(picked, file=sys.stderr)
        return ExitCode.CONFIG_ERRORS
    args.host = picked
    if spec.fleet is not None:
        count = len(spec.fleet.hosts) or spec.fleet.replica_count
        if not 0 <= args.host < count:
            listed = "hosts" if spec.fleet.hosts else "replicas"
            print(
                f"--host {args.host}: stack {args.stack!r} has {listed} 0..{count - 1} in fleet.{listed};"
                " pick one of them.",
                file=sys.stderr,
            )
            return ExitCode.CONFIG_ERRORS
    release = args.release or spec.environment.sglang_release
    argv: list[str] | None
    command: str | None
    where: str | None = None
    role = spec.fleet.roles()[args.host] if spec.fleet is not None and spec.fleet.hosts else None
    if spec.host.kind == "kubernetes":
        # The GPU facts are the cluster's nodes', read as a deployment reads them.
        spec, facts, argv, command = cluster_render(args.stack, spec, args.host, release)
    else:
        if spec.fleet is not None:
            # Each host of a fleet launches its own command (its port, a multi-node server's rank,
            # a disaggregated fleet's role).
            where = f"host {args.host}" + (f", a {role} worker" if role else "")
            spec = spec.for_host(args.host)
        facts = declared_facts(spec)
        try:
            argv = render_argv(spec.launch_flags(), release)
            command = render_command(spec.launch_flags(), release, env=spec.environment.env)
        except FlagError:
            argv = command = None  # the reasons are preflight errors already
    findings = run_preflight(spec, release)
    env = spec.environment.env
    plan = plan_memory(spec, release)
    errors = [f for f in findings if f.severity == "error"]
    if args.json:
        document: dict[str, Any] = {
            "stack": args.stack,
            "release": release,
            "pinned_release": spec.environment.sglang_release,
            "role": role,
            "argv": argv,
            "env": env,
            "command": command,
            "host_facts": facts.as_dict(),
            "memory": plan.as_dict(),
            "findings": [asdict(f) for f in findings],
            "secrets_set": list(stack_file.secret_keys),
            "ok": not errors,
        }
        print(json.dumps(document, indent=2))
    else:
        print(_render_text(args.stack, release, command, facts, explain(plan), findings, where))
    return ExitCode.CONFIG_ERRORS if errors else ExitCode.OK


def _kv_basis(findings: list[Finding]) -> str:
    """What the plan's KV pool is, when it is not the release's own code (preflight's warning says)."""
    approximated = any(finding.code == "kv-pool-approximated" for finding in findings)
    return "; its KV pool approximated: kv-pool-approximated below" if approximated else ""


def _render_text(
    stack: str,
    release: str,
    command: str | None,
    facts: RenderedFacts,
    plan: list[str],
    findings: list[Finding],
    where: str | None,
) -> str:
    heading = f"Stack {stack}, SGLang {release}" + (f" ({where})" if where else "")
    lines = [heading, "", "Launch command:"]
    lines.append(f"  {command}" if command else "  (not renderable for this release: see the errors below)")
    lines += ["", f"GPU facts ({facts.source}):", f"  {facts.line()}"]
    lines += [
        "",
        f"Memory plan (per GPU, SGLang {release}{_kv_basis(findings)}):",
        *(f"  {line}" for line in plan),
        "",
    ]
    listed = [f for f in findings if f.code != "memory-plan"]  # the memory plan is printed above
    counts = {s: sum(f.severity == s for f in listed) for s in ("error", "warning", "info")}
    lines.append(
        f"Preflight: {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info"
    )
    for finding in listed:
        lines.append(f"  [{finding.severity}] {finding.code} at {finding.key}: {finding.message}")
        if finding.fix:
            lines.append(f"      fix: {finding.fix}")
    return "\n".join(lines)


def configure_schema(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, help="file to write (default: print it)")


def run_schema(args: argparse.Namespace) -> int:
    text = json.dumps(spec_json_schema(), indent=2) + "\n"
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return ExitCode.OK
