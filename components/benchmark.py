"""Where stacks deployed before the `sglang_stacks` package find their benchmark provider."""

from sglang_stacks.components.benchmark import _BenchmarkProvider

__all__ = ["_BenchmarkProvider"]
