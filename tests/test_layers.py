"""The house's shape, read from the code's own imports (every import statement: at the top, inside functions, under
TYPE_CHECKING): no import circle between modules, every import running down the layers of kernelkit's package map
but the few named there with their reason, and no module over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import kernelkit

SRC = Path(kernelkit.__file__).resolve().parent

# Top to bottom: a module may import from its own layer and the layers below it. The same order, with what each
# layer is, is the package map in kernelkit/__init__.py.
LAYERS = [
    ["cli", "__main__", "_entry", "supervise"],
    ["demo", "__init__"],
    ["runs"],
    ["scale"],
    ["runner", "pool"],
    ["report"],
    ["doctor"],
    ["jobs"],
    ["store"],
    ["profiling"],
    ["torch_ops"],
    ["target"],
    ["formats"],
    ["ops"],
    ["backends"],
    ["loading"],
    ["measure"],
    ["spec", "verify"],
    ["registry", "results", "values", "cache", "units"],
    ["hygiene", "wire", "channel", "errors", "deadline"],
]
# Imports that run up a layer, each named in the package map with its reason (at most 4).
UPWARD = {
    ("kernelkit.ops.lowbit.module", "kernelkit.torch_ops"),
}
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the kernelkit modules it imports (a name imported from a package resolves to its module)."""

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {resolve(a.name) for a in node.names if a.name.startswith("kernelkit")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                if base.startswith("kernelkit"):
                    found |= {resolve(f"{base}.{a.name}") for a in node.names}
        edges[name] = found - {name, "kernelkit"}
    return edges


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(module: str) -> int:
    room = _room(module)
    return next(i for i, layer in enumerate(LAYERS) if room in layer)


def test_every_module_has_a_layer():
    rooms = {_room(m) for m in _modules()}
    assert rooms <= {room for layer in LAYERS for room in layer}, rooms - {r for layer in LAYERS for r in layer}


def test_no_two_modules_import_each_other_even_through_others():
    edges = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while (w := stack.pop()) != v:
                part.append(w)
            if part:
                circles.append(sorted([v, *part]))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    assert circles == []


def test_imports_run_down_the_layers_but_the_named_few():
    edges = _imports(_modules())
    upward = {(a, b) for a, targets in edges.items() for b in targets if _layer(b) < _layer(a)}
    assert upward == UPWARD and len(UPWARD) <= 4
    package_map = kernelkit.__doc__ or ""
    for importer, imported in UPWARD:
        assert f"{importer.removeprefix('kernelkit.')} -> {imported.removeprefix('kernelkit.')}" in package_map


def test_the_package_map_names_every_layer_in_order():
    package_map = kernelkit.__doc__ or ""
    def at(name: str) -> int:  # where the map's line for a package (cli/) or a module (runner.py) starts
        return max(package_map.find(f"\n    {name}/ "), package_map.find(f"\n    {name}.py "))

    positions = [at(layer[0]) for layer in LAYERS if layer[0] not in ("__init__", "__main__")]
    assert -1 not in positions and positions == sorted(positions), positions


def test_no_module_is_over_400_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}
