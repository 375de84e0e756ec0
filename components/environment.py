"""Where stacks deployed before the `sglang_stacks` package find their environment provider."""

from sglang_stacks.components.environment import PythonEnvironmentProvider as _PythonEnvironmentProvider

__all__ = ["_PythonEnvironmentProvider"]
