"""A package's face, lazily: its ``__init__`` names what it offers once, as the imports a type
checker reads under ``TYPE_CHECKING``; at run time the module that defines a name is imported the
first time the name is read (PEP 562's module ``__getattr__``), and ``__all__`` is derived from
those same lines.

Importing a package then costs nothing: the provider processes import ``sglang_stacks.components``
on the way to one resource's module and must not pay for the fleet's, and the companion CLI's
commands load only what they use. Type checkers and IDEs read the ``TYPE_CHECKING`` imports
themselves.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable

__all__ = ["lazy_face", "offered_names"]

# A face's TYPE_CHECKING lines, one name each (``from <module> import <Name> as <Name>``: the
# ``as`` marks the name as re-exported for type checkers, and ruff keeps such imports one a line).
_OFFERED = re.compile(r"^    from ([\w.]+) import (\w+) as \2$", re.MULTILINE)


def _sort_key(name: str) -> tuple[int, str]:
    """How `__all__` is sorted (ruff's RUF022): CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def offered_names(text: str) -> dict[str, str]:
    """Each name a face's source ``text`` offers, with the module that defines it."""
    return {name: module for module, name in _OFFERED.findall(text)}


def lazy_face(
    package: str,
) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """The ``__all__``, ``__getattr__`` and ``__dir__`` of ``package``, from the names its
    ``__init__`` imports under ``TYPE_CHECKING``."""
    face = sys.modules[package]
    with open(str(face.__file__), encoding="utf-8") as source:
        homes = offered_names(source.read())

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(face, name, value)  # read once; later reads are plain attributes
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(face), *homes})

    return sorted(homes, key=_sort_key), __getattr__, __dir__
