"""``Shape``: the base of the project's pydantic models, the typed shapes that cross a boundary (a
resource's inputs and outputs, the stack outputs, a host program's answer, the launch flags).

Its one setting: a model builds its validator when it is first used, not when its module is imported.
Every Pulumi program, dynamic-provider process and CLI command imports far more shapes than it
validates (a provider that benchmarks reads no stack file), and building a validator costs more than
declaring the class: see ``docs/performance.md``, "Shapes built when first used".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Shape"]


class Shape(BaseModel):
    """A pydantic model whose validator is built on first use; subclasses add their own settings."""

    model_config = ConfigDict(defer_build=True)
