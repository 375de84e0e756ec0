"""Where stacks deployed before the `sglang_stacks` package find their probe and claim providers."""

from sglang_stacks.components.host import ClaimProvider as _ClaimProvider
from sglang_stacks.components.host import ProbeProvider as _ProbeProvider

__all__ = ["_ClaimProvider", "_ProbeProvider"]
