"""The package's modules import each other without a circle: each room depends on the rooms below
it, read from the source. Every import counts: those that run when a module is imported, those a
type checker reads under ``TYPE_CHECKING`` and those inside functions (a circle hidden there is a
circle all the same). A package face's ``TYPE_CHECKING`` imports are the one exception: they name
what the face offers from its own submodules, which import their package anyway."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests._pulumi import ROOT

PACKAGE = "sglang_stacks"
# Programs shipped to hosts and run there on their own: they never import the package. Beside
# the programs of hostops/programs are modules of the package: each program's contract
# (``*_contract``), their base (``contract``) and their runner.
HOST_PROGRAMS = ("sglang_stacks.hostops.programs.",)


def _is_host_program(module: str) -> bool:
    name = module.rsplit(".", 1)[-1]
    return module.startswith(HOST_PROGRAMS) and not name.endswith("contract") and name != "runner"


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, *, face: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, wherever it is; a face's (``face``) ``TYPE_CHECKING``
    imports left out."""
    skipped: set[int] = set()
    if face:
        for node in tree.body:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                skipped |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped
    ]


def import_graph(root: Path = ROOT, package_name: str = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports (a module imports its
    parent packages too)."""
    sources = {_module_name(path, root): path for path in (root / package_name).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in sources.items():
        if _is_host_program(module):
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in _imports(tree, face=path.name == "__init__.py"):
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


@pytest.mark.parametrize("package", ["sglang_world", "sglang_emulator", "sglang_flags", "sglang_loadgen"])
def test_the_other_packages_have_no_import_circle_below_their_face(package: str) -> None:
    # Their top-level module imports what it offers at once, so every module "imports" it through
    # its parent: the circles that count are among the modules.
    graph = {
        module: {target for target in targets if target != package}
        for module, targets in import_graph(package_name=package).items()
        if module != package
    }

    assert len(graph) > 5  # the package's modules were read
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


def test_an_import_anywhere_is_an_edge_but_a_faces_type_checking_names() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import a.b\n"
        "if TYPE_CHECKING:\n    import c\nelse:\n    import d\n"
        "try:\n    import e\nexcept ImportError:\n    import f\n"
        "def g():\n    import h\n"
    )

    def names(face: bool) -> list[str]:
        found = _imports(ast.parse(source), face=face)
        return sorted(a.name for node in found for a in node.names if a.name != "TYPE_CHECKING")

    assert names(face=False) == ["a.b", "c", "d", "e", "f", "h"]
    assert names(face=True) == ["a.b", "d", "e", "f", "h"]


def test_a_circle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    # What hostops had: connection imported _ssh, which imported connection for its annotations.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "connection.py").write_text("from pkg._ssh import key_lines\n")
    (package / "_ssh.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.connection import Connection\n"
    )

    assert find_cycle(import_graph(tmp_path, "pkg")) == ["pkg._ssh", "pkg.connection", "pkg._ssh"]


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


SITTING_PACKAGES = (
    PACKAGE,
    "sglang_emulator",
    "sglang_world",
    "sglang_flags",
    "sglang_loadgen",
    "components",
    "toolchain",
    "benchmarks",
)
"""What the size rule holds: the package, the emulator, the world model, the flag tables, the load
generator, the Pulumi program's components, the toolchain and the benchmarks (a benchmark script
keeps its command line; what it measures with and how it reports are modules of their own beside it)."""


@pytest.mark.parametrize("package", SITTING_PACKAGES)
def test_no_module_of_the_package_is_longer_than_a_sitting(package: str) -> None:
    assert oversized_modules(ROOT / package) == []


def test_a_long_module_is_named_with_its_length(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "room").mkdir(parents=True)
    (package / "room" / "short.py").write_text("x = 1\n" * MODULE_LINES_MAX)
    (package / "room" / "long.py").write_text("x = 1\n" * (MODULE_LINES_MAX + 1))

    assert oversized_modules(package) == [f"pkg/room/long.py ({MODULE_LINES_MAX + 1} lines)"]
