"""The import paths under which a stack's state may name a provider, derived from the code.

Pulumi pickles each dynamic provider into the state by reference, as ``module:name``; ``refresh``,
``preview`` and ``destroy`` of a deployed stack import it from there. A provider renamed or moved
breaks every stack deployed with it, unless its old name stays bound where it was: in its module
(``OldName = NewName``, beside the class) or in a module kept for the purpose (the top-level
``components`` modules of the layout before the package). `provider_paths` finds them all by
walking the packages: each provider class where it is defined, and each other name bound to one.
tests/test_upgrade.py holds the paths of every release and fails when one is no longer found.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Iterator
from types import ModuleType

from sglang_stacks.resources.provider import TypedProvider

__all__ = ["LEGACY_PACKAGE", "provider_paths"]

LEGACY_PACKAGE = "components"
"""The top-level package of the layout before ``sglang_stacks``, kept for its provider names."""

_NOT_PROGRAM_MODULES = ("sglang_stacks.hostops.programs", "sglang_loadgen")
"""Programs that run on hosts (shipped as files, not imported here)."""


def _modules(package: str) -> Iterator[ModuleType]:
    root = importlib.import_module(package)
    yield root
    for found in pkgutil.walk_packages(root.__path__, f"{package}."):
        name = found.name
        if name.rsplit(".", 1)[-1] == "__main__" or name.startswith(_NOT_PROGRAM_MODULES):
            continue
        yield importlib.import_module(name)


def _is_provider(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, TypedProvider) and value is not TypedProvider


def provider_paths(packages: tuple[str, ...] = ("sglang_stacks", LEGACY_PACKAGE)) -> dict[str, type]:
    """Every ``module:name`` a state may name, with the provider class it loads today: each
    provider where its class is defined, each name bound to a provider under another name, and
    the names a legacy module exports (an import of a provider under its own name elsewhere is no
    path)."""
    paths: dict[str, type] = {}
    for package in packages:
        if importlib.util.find_spec(package) is None:
            continue  # an installed copy has no legacy package: its stacks were deployed from one
        for module in _modules(package):
            # A legacy module keeps the names its __all__ lists; other imports there are no paths.
            kept = getattr(module, "__all__", ()) if module.__name__.split(".")[0] == LEGACY_PACKAGE else ()
            for name, value in vars(module).items():
                if not _is_provider(value):
                    continue
                if name in kept or value.__module__ == module.__name__ or name != value.__name__:
                    paths[f"{module.__name__}:{name}"] = value
    return paths
