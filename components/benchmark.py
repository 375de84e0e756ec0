"""Where stacks deployed before the `sglang_stacks` package find their benchmark provider."""

from sglang_stacks.components.benchmark import BenchmarkProvider

_BenchmarkProvider = BenchmarkProvider
"""The name the provider had in earlier versions, pickled into their stacks' state."""

__all__ = ["_BenchmarkProvider"]
