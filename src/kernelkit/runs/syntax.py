"""A module's source as a syntax tree, for copying definitions out of it (runs/standalone.py): its top-level
bindings, where a node sits in the source, the free names of a definition under Python's scoping rules, text with
edits applied; values as literals, and whether a module is installed (imported) or the user's own (copied).
Positions are byte offsets into the UTF-8 source, as the ast module counts columns."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

Binding = tuple[ast.stmt, ast.alias | None]  # the statement, and for an import the name's alias
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class Module:
    """One imported module and its parsed source."""

    name: str
    module: types.ModuleType
    data: bytes
    tree: ast.Module
    bindings: dict[str, Binding] = field(default_factory=dict)  # top-level name -> the statement that binds it
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    starts: list[int] = field(default_factory=list)  # byte offset of each line's start

    @property
    def label(self) -> str:
        """How a copy names where its code comes from: kernelkit's module name, else the user's file name."""
        if self.name.partition(".")[0] == "kernelkit":
            return self.name
        return Path(getattr(self.module, "__file__", None) or self.name).name

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col if line <= len(self.starts) else len(self.data)

    def span(self, node: ast.AST, expect: str | None = None) -> tuple[int, int]:
        """Byte offsets of ``node``; ValueError where the source there is not ``expect`` (an f-string's inner
        positions are unreliable before Python 3.12)."""
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        if expect is not None and self.data[start:end] != expect.encode():
            raise ValueError(f"line {node.lineno} of {self.name} does not hold {expect!r} where its syntax tree "  # type: ignore[attr-defined]
                             "says")
        return start, end

    def line(self, number: int) -> str:
        return self.data[self.offset(number, 0):self.offset(number + 1, 0)].decode()

    def edited(self, start: int, end: int, edits: Sequence[tuple[int, int, str]]) -> str:
        """Source bytes [start, end) with each (from, to, text) edit applied; edits may not overlap."""
        out, at = [], start
        for a, b, text in sorted(edits):
            if a < at or b > end:
                raise ValueError(f"overlapping or outside edits in {self.name} at byte {a}")
            out += [self.data[at:a], text.encode()]
            at = b
        out.append(self.data[at:end])
        return b"".join(out).decode()

    def def_node(self, fn: types.FunctionType) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
        """The def (or lambda) that made ``fn``: found by its first line, and its name or parameters."""
        line = fn.__code__.co_firstlineno
        params = list(inspect.signature(fn).parameters)
        found: list[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda] = []
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn.__code__.co_name:
                if line in (node.lineno, *(d.lineno for d in node.decorator_list[:1])):
                    found.append(node)
            elif isinstance(node, ast.Lambda) and fn.__code__.co_name == "<lambda>" and node.lineno == line:
                args = node.args
                if [a.arg for a in (*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg)
                        if a is not None] == params:
                    found.append(node)
        return found[0] if len(found) == 1 else None


def load_module(name: str) -> Module:
    """Import module ``name`` and parse its source (OSError or TypeError where it has none)."""
    module = importlib.import_module(name)
    path = inspect.getsourcefile(module)
    if path is None:
        raise OSError(f"module {name} has no Python source")
    data = Path(path).read_bytes()
    tree = ast.parse(data, filename=path)
    starts, at = [], 0
    for line in data.splitlines(keepends=True):
        starts.append(at)
        at += len(line)
    mod = Module(name, module, data, tree, starts=starts)
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            mod.parents[child] = node
    for stmt, alias, fallback in _top_level(tree.body, False):
        for bound in ([_alias_name(alias)] if alias is not None else bound_names(stmt)):
            # The last statement binds, but not one in an except block (try: import x / except: x = None).
            if not (fallback and bound in mod.bindings):
                mod.bindings[bound] = (stmt, alias)
    return mod


def _top_level(body: Sequence[ast.stmt], fallback: bool) -> Iterator[tuple[ast.stmt, ast.alias | None, bool]]:
    """Module-level statements that bind names, looking into if/try/with blocks (not `if TYPE_CHECKING:`);
    ``fallback``: inside an except block."""
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name != "*":
                    yield stmt, alias, fallback
        elif isinstance(stmt, ast.If):
            if not (isinstance(stmt.test, ast.Name) and stmt.test.id == "TYPE_CHECKING"):
                yield from _top_level([*stmt.body, *stmt.orelse], fallback)
        elif isinstance(stmt, ast.Try):
            yield from _top_level([*stmt.body, *stmt.orelse, *stmt.finalbody], fallback)
            for handler in stmt.handlers:
                yield from _top_level(handler.body, True)
        elif isinstance(stmt, ast.With):
            yield from _top_level(stmt.body, fallback)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
            yield stmt, None, fallback


def _alias_name(alias: ast.alias) -> str:
    return alias.asname or alias.name.partition(".")[0]


def bound_names(stmt: ast.AST) -> list[str]:
    """The names a def, class or assignment statement binds."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    return [n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)]


def free_names(node: ast.AST, skip: Sequence[ast.AST] = ()) -> list[ast.Name]:
    """The Name loads in ``node`` that no function, lambda, comprehension or class inside it binds: what the
    module (or a closure) must provide. Annotations are left out (they become strings), as is anything in ``skip``."""
    found: list[ast.Name] = []

    def visit(n: ast.AST, bound: frozenset[str]) -> None:
        if any(n is s for s in skip):
            return
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load) and n.id not in bound:
                found.append(n)
            return
        if isinstance(n, (*_FUNCTIONS, ast.ClassDef, *_COMPREHENSIONS)):
            outer, inner = _scope_parts(n)
            for part in outer:
                visit(part, bound)
            inside = bound | _binds(n)
            for part in inner:
                visit(part, inside)
            return
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, ast.arguments) and not (isinstance(n, ast.AnnAssign) and child is n.annotation):
                visit(child, bound)

    visit(node, frozenset())
    return found


def _scope_parts(n: ast.AST) -> tuple[list[ast.AST], list[ast.AST]]:
    """(evaluated in the enclosing scope, evaluated in the new one)."""
    if isinstance(n, _FUNCTIONS):
        args = n.args
        defaults = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
        decorators = [] if isinstance(n, ast.Lambda) else list(n.decorator_list)
        body = [n.body] if isinstance(n, ast.Lambda) else list(n.body)
        return [*decorators, *defaults], body
    if isinstance(n, ast.ClassDef):
        return [*n.decorator_list, *n.bases, *(k.value for k in n.keywords)], list(n.body)
    gens = n.generators  # type: ignore[attr-defined]
    elements = [n.key, n.value] if isinstance(n, ast.DictComp) else [n.elt]  # type: ignore[attr-defined]
    rest = [p for g in gens for p in (g.target, *g.ifs)] + [g.iter for g in gens[1:]]
    return [gens[0].iter], [*elements, *rest]


def _binds(scope: ast.AST) -> frozenset[str]:
    """The names a function, lambda, comprehension or class body binds itself (a `global` one is not bound)."""
    names: set[str] = set()
    declared: set[str] = set()
    if isinstance(scope, _FUNCTIONS):
        args = scope.args
        names |= {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}
        body: list[ast.AST] = [scope.body] if isinstance(scope, ast.Lambda) else list(scope.body)
    elif isinstance(scope, ast.ClassDef):
        body = list(scope.body)
    else:
        body = [g.target for g in scope.generators]  # type: ignore[attr-defined]
    stack = body
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
            stack += _scope_parts(n)[0]
            continue
        elif isinstance(n, (ast.Lambda, *_COMPREHENSIONS)):
            stack += _scope_parts(n)[0]
            continue
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {_alias_name(a) for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            declared |= set(n.names)
        stack += list(ast.iter_child_nodes(n))
    return frozenset(names - declared)


def raw_string(text: str) -> str:
    """``text`` as a Python string literal: a raw triple-quoted one where it can be, else repr."""
    if '"""' not in text and not text.endswith("\\") and "\r" not in text:
        return f'r"""{text}"""'
    return repr(text)


def annotations(node: ast.AST) -> list[ast.expr]:
    found: list[ast.expr] = []
    for inner in ast.walk(node):
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = inner.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            found += [a.annotation for a in every if a is not None and a.annotation is not None]
            if inner.returns is not None:
                found.append(inner.returns)
        elif isinstance(inner, ast.AnnAssign):
            found.append(inner.annotation)
    return found


def literal(value: Any) -> str | None:
    """Python source for a plain value (numbers, strings, None, torch dtypes, and containers of them), or None."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else f"float({str(value)!r})"
    if isinstance(value, torch.dtype):
        return str(value)  # torch.float32
    if isinstance(value, (tuple, list, set, frozenset)):
        items = [literal(v) for v in value]
        if any(i is None for i in items):
            return None
        body = ", ".join(items)  # type: ignore[arg-type]
        if isinstance(value, tuple):
            return f"({body},)" if len(items) == 1 else f"({body})"
        if isinstance(value, list):
            return f"[{body}]"
        return f"{type(value).__name__}([{body}])"
    if isinstance(value, dict):
        pairs = [(literal(k), literal(v)) for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    return None


def installed(module: str) -> bool:
    """Whether ``module`` is the standard library's or an installed package's (kept as an import), not kernelkit's
    or a file of the user's (followed and copied)."""
    top = module.partition(".")[0]
    if top == "kernelkit":
        return False
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return True
    try:
        package = importlib.import_module(top)
    except ImportError:
        return True  # not here: whoever runs the file must have it
    files = [getattr(package, "__file__", None), *getattr(package, "__path__", [])]
    return any(part in ("site-packages", "dist-packages") for f in files if f for part in Path(f).parts)
