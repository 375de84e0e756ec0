"""Promote a winning stack's server configuration into another stack's file (usually baseline).

The `server` section, and the `draftModel` section that speculative flags depend on, are copied
as text, so the target file keeps its own comments and every other section. The change is shown
as a diff and written only after confirmation.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from sglang_stacks.config.spec import CONFIG_NAMESPACE, load_spec
from sglang_stacks.config.stackfile import read_stack_file, stack_path
from sglang_stacks.errors import SpecError
from sglang_stacks.exits import ExitCode

PROMOTED_SECTIONS = ("server", "draftModel")
_SECTION_LINE = re.compile(rf"^  {re.escape(CONFIG_NAMESPACE)}:(?P<key>[A-Za-z_]+):")


def _blocks(text: str) -> dict[str, tuple[int, int]]:
    """Each config section's line range [start, end) in a stack file's text."""
    lines = text.splitlines(keepends=True)
    starts = [(i, m.group("key")) for i, line in enumerate(lines) if (m := _SECTION_LINE.match(line))]
    blocks: dict[str, tuple[int, int]] = {}
    for number, (start, key) in enumerate(starts):
        end = starts[number + 1][0] if number + 1 < len(starts) else len(lines)
        # A section ends at the first line indented less than its body (a new top-level key).
        for i in range(start + 1, end):
            if lines[i].strip() and not lines[i].startswith("    ") and not lines[i].startswith("  #"):
                end = i
                break
        while end > start + 1 and lines[end - 1].strip().startswith("#") and lines[end - 1].startswith("  #"):
            end -= 1  # comments that introduce the next section stay with it
        blocks[key] = (start, end)
    return blocks


def promoted_text(winner_text: str, target_text: str) -> str:
    """The target file's text with the winner's promoted sections in place of its own."""
    winner_lines = winner_text.splitlines(keepends=True)
    target_lines = target_text.splitlines(keepends=True)
    winner_blocks, target_blocks = _blocks(winner_text), _blocks(target_text)
    if "server" not in winner_blocks:
        raise SpecError("The winning stack's file has no sglang-stacks:server section to promote.")
    if not target_blocks:
        raise SpecError("The target stack's file has no sglang-stacks: sections under config.")
    # Sections the target lacks go right after its last section, inside `config:`.
    config_end = max(end for _, end in target_blocks.values())
    edits: list[tuple[int, int, list[str]]] = []
    for key in PROMOTED_SECTIONS:
        new = winner_lines[slice(*winner_blocks[key])] if key in winner_blocks else []
        if new and not new[-1].endswith("\n"):
            new[-1] += "\n"  # the winner's file ended without a newline; the target's next line stays its own
        edits.append((*target_blocks.get(key, (config_end, config_end)), new))
    if target_lines and not target_lines[config_end - 1].endswith("\n"):
        target_lines[config_end - 1] += "\n"
    for start, end, new in sorted(edits, key=lambda edit: edit[0], reverse=True):
        target_lines[start:end] = new
    return "".join(target_lines)


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
