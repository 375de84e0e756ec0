"""Where stacks deployed before the `sglang_stacks` package find their probe and claim providers."""

from sglang_stacks.components.host import _ClaimProvider, _ProbeProvider

__all__ = ["_ClaimProvider", "_ProbeProvider"]
