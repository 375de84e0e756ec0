"""Where stacks deployed before the `sglang_stacks` package find their server provider."""

from sglang_stacks.components.server import _ServerProvider

__all__ = ["_ServerProvider"]
