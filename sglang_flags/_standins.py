"""Stand-ins for the packages a release imports but this interpreter lacks (torch, triton, ...).

A release's ``server_args`` imports half of SGLang, which imports torch, transformers and kernel
packages at module level. None of them should shape the parser, so the release's own code gets
stand-in modules whose every attribute is an ``Inert`` object (``_inert.py``). Whether one
nevertheless shaped the parser is checked by the child (``_child.py``): a parser value that is or
holds a stand-in, and a question put to a stand-in while the parser is built.

The machine the stand-ins describe is the common one: no GPU is visible, torch has none of the
attributes a vendor plugin (torch_npu, ...) would add, and probing for a package that is not
installed finds nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from sglang_flags._inert import PLUGIN_ATTRIBUTES, PYTHON_DUNDERS, Inert

__all__ = ["StandInFinder", "install"]


class _StandInModule(types.ModuleType):
    """A module of stand-ins: any attribute it is asked for is an ``Inert`` object."""

    def __getattr__(self, name: str) -> Any:
        if name in PYTHON_DUNDERS or name in PLUGIN_ATTRIBUTES:
            raise AttributeError(name)
        return Inert(f"{self.__name__}.{name}")


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []  # a package, so ``import torch.nn.functional`` comes back here
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


_IMPORT_MACHINERY = (os.path.dirname(importlib.__file__), "<frozen ", __file__)


def _importer() -> str:
    """The file whose import statement is being served, past the import machinery's frames."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
        frame = frame.f_back  # type: ignore[assignment]
    return frame.f_code.co_filename if frame is not None else ""


class StandInFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: supplies a stand-in for a package the release's code imports
    and nothing else can.

    Only imports made by files under ``release_root`` are served: the standard library's own
    probes for optional modules (``_winapi``) fail as they should. Packages named in
    ``protected`` (the release's ``sglang``) never get stand-ins: a module missing there is a
    real error of the release.
    """

    def __init__(self, release_root: str, protected: Sequence[str]) -> None:
        self.release_root = os.path.join(os.path.abspath(release_root), "")
        self.protected = frozenset(protected)
        self.served: set[str] = set()
        self.probing = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.split(".", 1)[0]
        if self.probing or top in self.protected:
            return None
        if top not in self.served and not _importer().startswith(self.release_root):
            return None
        self.served.add(top)
        return importlib.machinery.ModuleSpec(fullname, _StandInLoader(), is_package=True)


def _probe_without(finder: StandInFinder, find_spec: Callable[..., Any]) -> Callable[..., Any]:
    """``importlib.util.find_spec`` answering as if stand-ins did not exist.

    Releases probe for optional packages (``find_spec("flashinfer") is not None``); the answer
    must be "not installed", as on a machine without the package.
    """

    def probe(name: str, package: str | None = None) -> Any:
        finder.probing = True
        try:
            spec = find_spec(name, package)
        finally:
            finder.probing = False
        if spec is not None and isinstance(spec.loader, _StandInLoader):
            return None
        return spec

    return probe


def install(release_root: str, protected: Sequence[str]) -> StandInFinder:
    """Put a ``StandInFinder`` last on ``sys.meta_path`` and make package probes ignore it."""
    finder = StandInFinder(release_root, protected)
    sys.meta_path.append(finder)
    importlib.util.find_spec = _probe_without(finder, importlib.util.find_spec)
    return finder
