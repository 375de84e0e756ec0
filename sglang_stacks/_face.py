"""A package's face, lazily: its ``__init__`` names what it offers, and the module that defines a
name is imported the first time the name is read (PEP 562's module ``__getattr__``).

Importing a package then costs nothing: the provider processes import ``sglang_stacks.components``
on the way to one resource's module and must not pay for the fleet's, and the companion CLI's
commands load only what they use. Type checkers read the ``TYPE_CHECKING`` imports beside it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_face"]


def lazy_face(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose names live in the submodules
    ``homes`` gives (name -> submodule, relative to the package)."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)  # read once; later reads are plain attributes
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
