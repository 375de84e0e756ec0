"""Promote a winning stack's server configuration into another stack's file (usually baseline).

The `server` section, and the `draftModel` section that speculative flags depend on, are copied
with `StackText`, so the target file keeps its own comments, order and every other section. The
change is shown as a diff and written only after confirmation.
"""

from __future__ import annotations

import difflib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from sglang_stacks.config.spec import CONFIG_NAMESPACE, load_spec
from sglang_stacks.config.stackfile import StackText, read_stack_file, stack_path
from sglang_stacks.errors import SpecError
from sglang_stacks.exits import ExitCode

PROMOTED_SECTIONS = ("server", "draftModel")


def promoted_text(winner_text: str, target_text: str) -> str:
    """The target file's text with the winner's promoted sections in place of its own."""
    winner, target = StackText(winner_text, "the winning stack's file"), StackText(target_text)
    if winner.section("server") is None:
        raise SpecError("The winning stack's file has no sglang-stacks:server section to promote.")
    if not any(key.startswith(f"{CONFIG_NAMESPACE}:") for key in target.config()):
        raise SpecError("The target stack's file has no sglang-stacks: sections under config.")
    for name in PROMOTED_SECTIONS:
        target.put_section(name, winner.section(name))
    return target.text()


def _confirmed(confirm: Callable[[str], str], question: str, out: TextIO) -> bool:
    try:
        answer = confirm(question)
    except EOFError:  # no terminal to ask (a script or CI job): not confirmed
        print(file=out)
        return False
    return answer.strip().lower() in ("y", "yes")


def promote(
    winner: str,
    target: str,
    *,
    yes: bool,
    stacks_dir: Path,
    confirm: Callable[[str], str] = input,
    out: TextIO,
    winner_text: str | None = None,
) -> int:
    """Shows the diff of `target`'s file and writes it after confirmation; the exit code.

    ``winner_text`` is the winner's stack file when it is not a file in ``stacks_dir`` (a sweep's
    winner, rebuilt from its campaign without the pool host's port)."""
    if winner == target:
        raise SpecError(f"Promote copies one stack into another; {winner!r} was named twice.")
    winner_path, target_path = stack_path(winner, stacks_dir), stack_path(target, stacks_dir)
    if winner_text is None:
        read_stack_file(winner, stacks_dir)
        winner_text = winner_path.read_text()
    read_stack_file(target, stacks_dir)
    before = target_path.read_text()
    after = promoted_text(winner_text, before)
    if after == before:
        print(f"{target} already has {winner}'s server configuration; nothing to promote.", file=out)
        return ExitCode.OK
    # The result must still be a valid stack before anything is written.
    with tempfile.TemporaryDirectory() as scratch:
        stack_path(target, Path(scratch)).write_text(after)
        try:
            load_spec(read_stack_file(target, Path(scratch)).sections, target)
        except SpecError as error:
            raise SpecError(
                f"Promoting {winner}'s server into {target} would make an invalid stack, so nothing was "
                f"written. {error} Fix {winner_path.name} first, then promote again."
            ) from None
    diff = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=str(target_path),
        tofile=f"{target_path} (with {winner}'s server)",
    )
    out.write("".join(diff))
    if not yes and not _confirmed(confirm, f"\nWrite this to {target_path}? [y/N] ", out):
        print("Nothing written. Answer y to write it, or pass --yes to write without asking.", file=out)
        return ExitCode.NOT_WRITTEN
    target_path.write_text(after)
    print(
        f"Promoted {winner}'s {' and '.join(PROMOTED_SECTIONS)} into {target_path}. "
        f"`pulumi preview --diff -s {target}` shows what deploying it will change.",
        file=out,
    )
    return ExitCode.OK
