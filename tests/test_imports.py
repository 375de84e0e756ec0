"""The package's modules import each other without a circle: each room depends on the rooms below
it, read from the source (module-level imports; those under ``TYPE_CHECKING`` and inside functions
do not run when a module is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests._pulumi import ROOT

PACKAGE = "sglang_stacks"
# Programs shipped to hosts and run there on their own: they never import the package.
HOST_PROGRAMS = ("sglang_stacks.hostops.programs.", "sglang_stacks.hostops.loadgen.")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: at its top level, or inside a top-level
    ``if``/``try``/``with`` (never under ``if TYPE_CHECKING:``, never in a function or class)."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            pending += node.orelse if _is_type_checking(node.test) else [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            pending += [*node.body, *node.orelse, *node.finalbody]
            pending += [stmt for handler in node.handlers for stmt in handler.body]
        elif isinstance(node, ast.With):
            pending += node.body
    return found


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports when imported (a
    module imports its parent packages too)."""
    sources = {_module_name(path): path for path in (ROOT / PACKAGE).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in sources.items():
        if module.startswith(HOST_PROGRAMS):
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in _module_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
                continue
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from a import b` imports the module a.b when there is one, else reads a name of a.
            targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names}
        expanded = set()
        for target in targets:
            parts = target.split(".")
            expanded |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        graph[module] = {t for t in expanded if t in sources and t != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()

    assert len(graph) > 90  # every module of the package was read
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


@pytest.mark.parametrize(
    ("graph", "circle"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": set(), "c": {"c2"}, "c2": {"c"}}, ["c", "c2", "c"]),
        ({"a": {"b"}, "b": set()}, None),
    ],
)
def test_a_circle_is_found_and_named(graph: dict[str, set[str]], circle: list[str] | None) -> None:
    assert find_cycle(graph) == circle


def test_an_import_under_type_checking_or_in_a_function_is_no_edge_and_a_top_level_one_is() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import a.b\n"
        "if TYPE_CHECKING:\n    import c\nelse:\n    import d\n"
        "try:\n    import e\nexcept ImportError:\n    import f\n"
        "def g():\n    import h\n"
    )

    names = sorted(
        alias.name
        for node in _module_level_imports(tree)
        for alias in node.names
        if alias.name != "TYPE_CHECKING"
    )

    assert names == ["a.b", "d", "e", "f"]


def test_the_circle_orchestrate_had_would_be_found() -> None:
    # What the layout before drive/ had: the rollout and recover importing each other.
    graph = import_graph()
    graph["sglang_stacks.drive.recover"] = {
        *graph["sglang_stacks.drive.recover"],
        "sglang_stacks.drive.rollout",
    }

    assert find_cycle(graph) == [
        "sglang_stacks.drive.recover",
        "sglang_stacks.drive.rollout",
        "sglang_stacks.drive.recover",
    ]


MODULE_LINES_MAX = 300
"""A module reads in one sitting: past this, it holds more than one concern and is split by them."""


def oversized_modules(root: Path, limit: int = MODULE_LINES_MAX) -> list[str]:
    """Each module under ``root`` longer than ``limit`` lines, as ``path (N lines)``, longest first."""
    lengths = {path: len(path.read_text().splitlines()) for path in root.rglob("*.py")}
    return [
        f"{path.relative_to(root.parent)} ({lines} lines)"
        for path, lines in sorted(lengths.items(), key=lambda item: -item[1])
        if lines > limit
    ]


def test_no_module_of_the_package_is_longer_than_a_sitting() -> None:
    assert oversized_modules(ROOT / PACKAGE) == []


def test_a_long_module_is_named_with_its_length(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "room").mkdir(parents=True)
    (package / "room" / "short.py").write_text("x = 1\n" * MODULE_LINES_MAX)
    (package / "room" / "long.py").write_text("x = 1\n" * (MODULE_LINES_MAX + 1))

    assert oversized_modules(package) == [f"pkg/room/long.py ({MODULE_LINES_MAX + 1} lines)"]
