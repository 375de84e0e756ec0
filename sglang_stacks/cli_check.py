"""``sglang-stacks check [stack]``: the setup and a stack checked in seconds, before any update: the
Pulumi CLI and its backend, the passphrase, and (given a stack) its file, its spec, preflight and
whether its host answers. One line a check, each failure with its fix; the exit code says the result
(0 all good, 1 the stack has a problem, 2 the setup has one)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from sglang_stacks.config.passphrase import (
    DEMO_PASSPHRASE,
    passphrase_in_effect,
    refuse_secrets_under_the_demo_passphrase,
)
from sglang_stacks.config.preflight import run_preflight
from sglang_stacks.config.spec import load_spec
from sglang_stacks.config.stackfile import read_stack_file, stack_path
from sglang_stacks.config.yaml_errors import yaml_error
from sglang_stacks.errors import StacksError
from sglang_stacks.exits import ExitCode
from sglang_stacks.hostops import backend_lock as locks
from sglang_stacks.hostops.reach import host_answers
from sglang_stacks.project import find_project_dir, stacks_dir

__all__ = ["ACCEPTED_CLI_VERSIONS", "configure_check", "run_check"]

ACCEPTED_CLI_VERSIONS = ("v3.272.0", "v3.274.1")
"""The Pulumi CLI releases the project runs with (scripts/bootstrap.sh accepts the same)."""
_COMMAND_S = 30.0


class CheckFailed(Exception):
    """One check's failure: the sentence with its fix."""


@dataclass(frozen=True)
class Outcome:
    """What one check found: ``passed`` with what it saw, or not with the failure's sentence."""

    name: str
    passed: bool
    said: str


def configure_check(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", nargs="?", help="also check this stack: its file, spec, preflight, host")
    parser.add_argument(
        "--after-failure",
        action="store_true",
        help="after a failed `pulumi` command on the stack (scripts/env.sh's shell runs it): say only "
        "what Pulumi's message leaves out, the stack file's YAML error or a killed update's lock",
    )


def run_check(args: argparse.Namespace) -> int:
    project = find_project_dir()
    if args.after_failure:
        return _after_failure(args.stack, stacks_dir(project)) if args.stack else ExitCode.OK
    setup = [
        _run("Pulumi CLI", _cli),
        _run("backend", lambda: _backend(project)),
        _run("passphrase", _passphrase),
    ]
    stack = []
    if args.stack is not None and all(outcome.passed for outcome in setup[:1]):
        stack = _stack_checks(args.stack, stacks_dir(project))
    for outcome in (*setup, *stack):
        print(f"  {'ok  ' if outcome.passed else 'FAIL'}  {outcome.name}: {outcome.said}")
    if not all(outcome.passed for outcome in setup):
        return ExitCode.BAD_INPUT
    return ExitCode.OK if all(outcome.passed for outcome in stack) else ExitCode.CONFIG_ERRORS


def _run(name: str, check: Callable[[], str]) -> Outcome:
    try:
        return Outcome(name, True, check())
    except (CheckFailed, StacksError) as error:
        return Outcome(name, False, str(error))


def _pulumi(*args: str, cwd: Path | None = None) -> str:
    found = shutil.which("pulumi")
    if found is None:
        raise CheckFailed("no `pulumi` on PATH. Run `. scripts/env.sh` (it builds and puts the CLI there).")
    try:
        done = subprocess.run(
            [found, *args], cwd=cwd, capture_output=True, text=True, timeout=_COMMAND_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"`pulumi {' '.join(args)}` did not answer in {_COMMAND_S:g} s.") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error printed"])[-1]
        raise CheckFailed(f"`pulumi {' '.join(args)}` failed: {last}")
    return done.stdout.strip()


def _cli() -> str:
    version = _pulumi("version")
    if version not in ACCEPTED_CLI_VERSIONS:
        raise CheckFailed(
            f"`pulumi` on PATH is {version}; this project runs with {' or '.join(ACCEPTED_CLI_VERSIONS)}. "
            "Run `. scripts/env.sh`, which puts one of them first on PATH."
        )
    return f"{version} ({shutil.which('pulumi')})"


def _backend(project: Path) -> str:
    url = os.environ.get("PULUMI_BACKEND_URL")
    if not url:
        raise CheckFailed(
            "PULUMI_BACKEND_URL is not set. Run `. scripts/env.sh` to select the local backend."
        )
    try:
        listed = json.loads(_pulumi("stack", "ls", "--json", cwd=project) or "[]")
    except CheckFailed as error:
        raise CheckFailed(f"{error} Run `. scripts/env.sh`: it creates the local backend's folder.") from None
    return f"{url} ({len(listed)} stack(s) of this project)"


def _passphrase() -> str:
    passphrase = passphrase_in_effect(os.environ)
    if passphrase is None:
        raise CheckFailed(
            "neither PULUMI_CONFIG_PASSPHRASE nor PULUMI_CONFIG_PASSPHRASE_FILE is set: Pulumi cannot "
            "read or write a stack's secrets. Put a passphrase in a file only you can read and export "
            "PULUMI_CONFIG_PASSPHRASE_FILE=<that file>."
        )
    if passphrase == DEMO_PASSPHRASE:
        return "the demo passphrase (fine for the shipped stacks; a stack with a secret needs your own)"
    source = "PULUMI_CONFIG_PASSPHRASE" if "PULUMI_CONFIG_PASSPHRASE" in os.environ else "the passphrase file"
    return f"your own, from {source}"


def _stack_checks(stack: str, folder: Path) -> list[Outcome]:
    try:
        stack_file = read_stack_file(stack, folder)
        spec = load_spec(stack_file.sections, stack)
    except StacksError as error:
        return [Outcome(f"stack {stack}", False, str(error))]
    secrets = ", ".join(stack_file.secret_keys) or "no secrets"
    found = [Outcome(f"stack {stack}", True, f"valid (SGLang {spec.environment.sglang_release}; {secrets})")]
    if stack_file.secret_keys:
        found.append(_run("secrets", functools.partial(_secrets_kept, stack, stack_file.secret_keys)))
    found.append(_run("update lock", functools.partial(_lock, stack)))
    findings = run_preflight(spec, spec.environment.sglang_release)
    errors = [f"{f.code}: {f.message}" for f in findings if f.severity == "error"]
    warnings = [f.code for f in findings if f.severity == "warning"]
    said = f"{len(warnings)} warning(s){': ' + ', '.join(warnings) if warnings else ''}"
    found.append(Outcome("preflight", not errors, "; ".join(errors) if errors else f"no errors, {said}"))
    hosts = [spec.for_host(i).host for i in range(len(spec.fleet.hosts))] if spec.fleet else [spec.host]
    for index, host in enumerate(hosts):
        found.append(_run(f"host {index}" if spec.fleet else "host", functools.partial(host_answers, host)))
    return found


def _after_failure(stack: str, folder: Path) -> int:
    """What a failed ``pulumi`` command's own message leaves out, on stderr, and nothing when all is
    well: Pulumi names a stack file's YAML error without the file or a fix, and a killed update's lock
    with only `pulumi cancel`, which leaves its pending operations. The exit code stays Pulumi's."""
    path = stack_path(stack, folder)
    try:
        text = path.read_text(encoding="utf-8")
        yaml.safe_load(text)
    except OSError:
        pass  # Pulumi said that the stack has no file
    except yaml.YAMLError as error:
        print(f"sglang-stacks: {yaml_error(f'{folder.name}/{path.name}', text, error)}", file=sys.stderr)
        return ExitCode.OK
    held = _run("update lock", functools.partial(_lock, stack))
    if not held.passed:
        print(f"sglang-stacks: {stack}'s update lock is {held.said}", file=sys.stderr)
    return ExitCode.OK


def _secrets_kept(stack: str, keys: tuple[str, ...]) -> str:
    """The program's own refusal of secrets under the demo passphrase, said before any update."""
    refuse_secrets_under_the_demo_passphrase(stack, keys)
    return "under a passphrase of your own"


def _lock(stack: str) -> str:
    """Whether an update holds ``stack``'s lock, which would stop the next one: a live one is waited
    for, a killed one's is let go of by ``recover``."""
    held = [lock for _, lock in locks.read_locks(locks.backend_url(), stack)]
    if not held:
        return "none held (an update can start)"
    here = socket.gethostname()
    lock = held[0]
    since = f" since {lock.timestamp:%Y-%m-%d %H:%M:%S}" if lock.timestamp else ""
    if lock.hostname != here:
        raise CheckFailed(
            f"held by an update on {lock.hostname} (pid {lock.pid}){since}. Let it finish there; if it "
            f"was killed, run `sglang-stacks recover {stack}` on that machine."
        )
    if locks.holds(lock):
        raise CheckFailed(f"held by an update running now (pid {lock.pid}){since}: let it finish.")
    raise CheckFailed(
        f"left by a killed update (pid {lock.pid}{since}, no longer running): the next `pulumi up` stops "
        f"at it. Run `sglang-stacks recover {stack}`: it lets go of the lock and clears what that update "
        "left on the host."
    )
