"""The contract of ``tree_digest.sh``: a folder on the host listed for its tree digest, each file's
sha256 in the order the digest is taken over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from sglang_stacks.errors import ArtifactError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import ON_HOST, Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult, tail

__all__ = ["TREE_DIGEST", "ListTree", "Listing", "TreeDigestExit"]


class TreeDigestExit(ProgramExit):
    """How ``tree_digest.sh`` ends."""

    OK = 0
    """It listed the folder, or said it is absent."""
    NOT_ENTERED = 3, ArtifactError
    """The folder is there but cannot be entered (its permissions)."""
    NOT_SIZED = 4, ArtifactError
    """A file could not be sized: a broken symbolic link, or a file that cannot be read."""
    NOT_HASHED = 5, ArtifactError
    """A file could not be hashed: one that cannot be read."""


TREE_DIGEST = Program(file="tree_digest.sh", exits=TreeDigestExit, error=ArtifactError)
"""``tree_digest.sh``."""


@dataclass(frozen=True)
class Listing:
    """A folder as ``sha256sum`` lists it."""

    size_bytes: int
    """Total size of its files."""
    text: str
    """One ``<sha256>  ./<path>`` line per file (symbolic links followed), sorted by path byte by
    byte: the text the tree digest is the sha256 of."""


class ListTree(Request[Listing | None]):
    """Lists ``folder``; the answer is None when there is no such folder."""

    program: ClassVar[Program] = TREE_DIGEST

    folder: Annotated[str, ON_HOST]

    def answer(self, conn: Connection, result: CommandResult) -> Listing | None:
        first, _, listing = result.stdout.partition("\n")
        if first == "absent":
            return None
        words = first.split()
        if words[:1] != ["present"] or len(words) != 2 or not words[1].isdigit():
            raise self.failure(conn, TreeDigestExit.NOT_HASHED, result)
        return Listing(int(words[1]), listing)

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        return ArtifactError(
            f"Hashing the draft model at {self.folder} on {conn.label} failed (exit {int(code)}): "
            f"{tail(result.stderr or result.stdout)}. Fix the unreadable files or broken links it names, "
            "then run the update again."
        )
