"""Where stacks deployed before the `sglang_stacks` package find their server provider."""

from sglang_stacks.components.server import ServerProvider

_ServerProvider = ServerProvider
"""The name the provider had in earlier versions, pickled into their stacks' state."""

__all__ = ["_ServerProvider"]
