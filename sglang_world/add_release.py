"""Add an SGLang release in one command: everything the project takes from a release's own code.

    python -m sglang_world.add_release 0.5.24

From the release's wheel (downloaded with pip, no dependencies, cached; never installed), each step
the project's own recorder:

1. its flag table (``python -m sglang_flags.regenerate``),
2. what its ``ServerArgs`` resolves for memory at every grid point (``python -m sglang_world.record``),
3. its scheduling numbers (``python -m sglang_world.record_scheduling``),
4. the code that sizes its KV pool (``python -m sglang_world.pool_code``),
5. ``docs/releases.md`` (``python -m sglang_flags.releases_doc``).

Then it proves the project's rules for the release against the new recording (its own entry in
``releases.py``, else the previous release's, which it may share), and says what changed against the
previous release: flags added and removed, grid points resolved differently, the pool code, the
scheduling numbers. A stack that names its model's configuration is judged by the release's own code
whatever the rules say (``execute.py``); the rules serve the emulator's other profiles, the search's
speed and stacks that name none. Exit 0 when the release is added and its rules hold, 1 when it is
added and the rules need an entry (what to write is printed), 2 when a step failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict

from sglang_flags import load_table, release_key
from sglang_world.grid import GRID, launch_of, model_kind_of
from sglang_world.pool_code import pool_code
from sglang_world.recorded_store import recorded_releases, recorded_rows, row_compared, settings_compared
from sglang_world.releases import judged_releases, rules_for
from sglang_world.scheduling import scheduling_rules
from sglang_world.settings import resolve_with_rules

__all__ = ["main"]


def _previous(release: str, releases: list[str]) -> str | None:
    older = [r for r in releases if release_key(r) < release_key(release)]
    return older[-1] if older else None


def prove_rules(release: str, rules_of: str) -> list[str]:
    """Grid points where ``rules_of``'s rules, applied to ``release``, differ from what ``release``'s
    own code resolved (an empty list: the rules hold on the whole grid)."""
    rules = rules_for(rules_of)
    assert rules is not None
    flag = load_table(release).by_dest("max_prefill_tokens")
    default_prefill = int(flag.default) if flag is not None and flag.default is not None else 16384
    differing = []
    for point, row in zip(GRID, recorded_rows(release), strict=True):
        ours = resolve_with_rules(
            release, rules, launch_of(point), point.gpu_mib, model_kind_of(point), default_prefill
        )
        theirs = row_compared(row.values) if row.values is not None else None
        if theirs is None:
            if row.error != "SystemExit: 2" and not (ours.refusal and ours.refusal in (row.error or "")):
                differing.append(f"{point}: the release raised {row.error!r}, the rules {ours.refusal!r}")
        elif ours.refusal is not None or settings_compared(ours) != theirs:
            differing.append(f"{point}: the rules {settings_compared(ours)}, the release {theirs}")
    return differing


def _changes(release: str, previous: str) -> list[str]:
    """What ``release``'s own code decides differently from ``previous``'s."""
    old = {flag.long_name for flag in load_table(previous).flags}
    new = {flag.long_name for flag in load_table(release).flags}
    said = [
        f"flags added: {', '.join(sorted(new - old)) or 'none'}",
        f"flags removed: {', '.join(sorted(old - new)) or 'none'}",
    ]
    if previous in recorded_releases():
        rows = zip(recorded_rows(previous), recorded_rows(release), strict=True)
        moved = sum(1 for a, b in rows if (a.values, a.error) != (b.values, b.error))
        said.append(f"memory settings: {moved} of {len(GRID)} grid points resolved differently")
    said.append(f"KV pool code: {pool_code(previous)} -> {pool_code(release)}")
    before, after = (asdict(scheduling_rules(r, environ={})) for r in (previous, release))
    changed = sorted(k for k in before if k not in ("release", "overridable") and before[k] != after[k])
    said.append(f"scheduling numbers changed: {', '.join(changed) or 'none'}")
    return said


def _step(name: str, run: Callable[[list[str]], int], argv: list[str]) -> int:
    print(f"== {name}: {' '.join(argv)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    code = run(argv)
    print(f"   {name}: exit {code} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return code


def _report(release: str) -> int:
    """What changed against the previous release and whether the rules hold (a fresh process's
    reading of the files the steps wrote)."""
    previous = _previous(release, judged_releases())
    if previous is not None:
        print(f"What changed against {previous}:")
        for line in _changes(release, previous):
            print(f"  {line}")
    rules_of = release if rules_for(release) is not None else previous
    if rules_of is None:
        print(f"No release before {release} has rules: write its Rules entry in sglang_world/releases.py.")
        return 1
    differing = prove_rules(release, rules_of)
    if not differing and rules_of == release:
        print(f"The project's rules for {release} give what its own code resolved at all {len(GRID)} points.")
        return 0
    if not differing:
        print(
            f"{rules_of}'s rules give what {release}'s own code resolved at all {len(GRID)} points: add "
            f'"{release}" beside "{rules_of}" in RELEASE_RULES (sglang_world/releases.py); run the tests.'
        )
        return 1
    print(f"{rules_of}'s rules differ from {release}'s code at {len(differing)} of {len(GRID)} points, e.g.:")
    for line in differing[:5]:
        print(f"  {line}")
    print(
        f"Write a Rules entry for {release} in sglang_world/releases.py (tests/test_world_releases.py checks"
        " it point by point). Until then, stacks that name model.config are judged by the release's own code."
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_world.add_release", description=__doc__.split("\n")[0]
    )
    parser.add_argument("release", help="the release to add, e.g. 0.5.24")
    parser.add_argument("--report", action="store_true", help="only say what changed and prove the rules")
    args = parser.parse_args(argv)
    release = args.release
    if args.report:
        return _report(release)
    from sglang_flags import regenerate, releases_doc
    from sglang_world import pool_code as pool_code_step
    from sglang_world import record, record_scheduling

    started = time.monotonic()
    steps: tuple[tuple[str, Callable[[list[str]], int], list[str]], ...] = (
        ("flag table", regenerate.main, [release]),
        ("memory settings over the grid", record.main, [release]),
        ("scheduling numbers", record_scheduling.main, [release]),
        ("KV pool code", pool_code_step.main, [release]),
        ("docs/releases.md", releases_doc.main, []),
    )
    for name, run, step_argv in steps:
        if _step(name, run, step_argv) == 2:
            print(f"error: {name} failed for SGLang {release}; nothing after it was run", file=sys.stderr)
            return 2
    print(f"\nSGLang {release}: its code recorded in {time.monotonic() - started:.0f} s.", flush=True)
    # The steps rewrote files this process has read; a fresh one reads them as written.
    return subprocess.run([sys.executable, "-m", "sglang_world.add_release", release, "--report"]).returncode


if __name__ == "__main__":
    sys.exit(main())
