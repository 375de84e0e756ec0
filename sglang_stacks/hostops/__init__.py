"""Host operations: how a GPU host is reached and what runs there (the claim, the probe, the
serving note, the server process, SGLang's router, the load generator). The programs that run on
a host are files in ``programs``, each with its contract beside it, run by ``programs.runner``.
No Pulumi here: the resources in ``components`` call these."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.hostops.claim import Claim as Claim
    from sglang_stacks.hostops.connection import Connection as Connection
    from sglang_stacks.hostops.session import Session as Session
    from sglang_stacks.hostops.session import open_session as open_session
    from sglang_stacks.hostops.transport import CommandResult as CommandResult
    from sglang_stacks.hostops.transport import HostPath as HostPath
    from sglang_stacks.hostops.transport import run as run
    from sglang_stacks.hostops.transport import upload as upload


__all__, __getattr__, __dir__ = lazy_face(__name__)
