"""The contract of ``swap_folder.sh``: an uploaded folder put in place of another whole, so no stale
file of an older version survives; the upload is removed whatever happens."""

from __future__ import annotations

from typing import Annotated, ClassVar

from sglang_stacks.errors import HostError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import ON_HOST, Program, ProgramExit, Request
from sglang_stacks.hostops.transport import CommandResult, tail

__all__ = ["SWAP_FOLDER", "SwapFolder", "SwapFolderExit"]


class SwapFolderExit(ProgramExit):
    """How ``swap_folder.sh`` ends (it stops at the first command that fails, ``set -e``)."""

    OK = 0
    """The upload is in the folder's place."""
    MOVE_FAILED = 1, HostError
    """A rename failed (``mv`` says why: permissions, another file system); the folder is as it was
    or absent, and the upload is removed."""


SWAP_FOLDER = Program(file="swap_folder.sh", exits=SwapFolderExit, error=HostError)
"""``swap_folder.sh``."""


class SwapFolder(Request[None]):
    """Puts ``staging`` in place of ``folder``."""

    program: ClassVar[Program] = SWAP_FOLDER
    default_limit_s: ClassVar[float] = 120.0

    staging: Annotated[str, ON_HOST]
    """The uploaded folder."""
    folder: Annotated[str, ON_HOST]
    """Where it belongs."""

    def answer(self, conn: Connection, result: CommandResult) -> None:
        return None

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        return HostError(
            f"Moving the uploaded draft model into {self.folder} on {conn.label} failed: "
            f"{tail(result.stderr)}. Check that the user may write to {self.folder} and its parent, "
            "then run the update again."
        )
