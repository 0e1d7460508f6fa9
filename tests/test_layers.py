"""The package's folders are its layers (DESIGN.md, "Layers"): every module sits in one,
imports only from its own layer or lower ones, and no two modules import each other, even
through others or for type checking only. Read from the source, so a new module that
breaks the rule fails here before anyone has to untangle it."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "insitubatch_nodes"

# Lowest first. `io` is split by job, lowest first; its root holds the two sources, which
# use every job of it.
LAYERS = (
    "core",
    "io.host",
    "io.stores",
    "io.metadata",
    "io.cache",
    "io.reads",
    "io",
    "device",
    "nodes",
    "loader",
    "builder",
    "cli",
)
TOP_LEVEL = {layer.split(".")[0] for layer in LAYERS}
FACADE = "insitubatch_nodes"  # the package's __init__: the public names, from every layer


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every module of the package that `name` imports, wherever the import statement is
    (module level, inside a function, under `TYPE_CHECKING`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                stem = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*stem, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def _layer(name: str) -> int:
    """Index in `LAYERS` of the deepest layer holding module `name`."""
    relative = name.removeprefix(f"{FACADE}.")
    matches = [
        i for i, layer in enumerate(LAYERS) if relative == layer or relative.startswith(f"{layer}.")
    ]
    assert matches, f"{name} lies in no layer: move it into one of {LAYERS}"
    return max(matches, key=lambda i: len(LAYERS[i]))


GRAPH = {name: set(_imports(name, path)) for name, path in MODULES.items()}


def test_the_package_root_holds_only_layers() -> None:
    loose = sorted(
        entry.name
        for entry in PACKAGE.iterdir()
        if entry.name not in {"__init__.py", "py.typed", "__pycache__"}
        and entry.name not in TOP_LEVEL
    )
    assert not loose, f"{loose} sit at the package root: each belongs to one of {sorted(TOP_LEVEL)}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != FACADE))
def test_no_module_imports_from_a_higher_layer(name: str) -> None:
    own = _layer(name)
    upward = sorted(t for t in GRAPH[name] if t != FACADE and _layer(t) > own)
    assert not upward, (
        f"{name} (layer {LAYERS[own]}) imports {upward} from higher layers; move the shared "
        f"piece down, or hand it in from above"
    )
    assert FACADE not in GRAPH[name], f"{name} imports the package facade; import the module"


def test_no_import_cycles() -> None:
    """Tarjan's strongly connected components over the import graph: each must be one
    module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(GRAPH)))
    for name in GRAPH:
        if name not in index:
            visit(name)
    assert not cycles, f"modules that import each other: {cycles}"


def test_the_core_is_pure() -> None:
    """The core computes; it never reads, starts a thread or touches a device: it imports
    only the standard library and numpy, so its functions are tested without IO."""
    forbidden = {"asyncio", "concurrent", "multiprocessing", "os", "socket", "subprocess"}
    allowed = {*sys.stdlib_module_names, "numpy", "insitubatch_nodes"} - forbidden - {"threading"}
    outside = set()
    for name, path in MODULES.items():
        if name == FACADE or _layer(name) != LAYERS.index("core"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                outside |= {a.name.split(".")[0] for a in node.names} - allowed
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                outside |= {node.module.split(".")[0]} - allowed
    assert not outside, f"the core imports {sorted(outside)}"
