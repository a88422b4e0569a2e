"""Functions as standalone Python source: an impl (or a reference, or an input factory) and everything it uses,
copied from its modules into one module body that runs without kernelkit.

    body = Standalone(reserved={"torch": "torch", "nn": "torch.nn"})   # names the caller's own code relies on
    name = body.add(impl.fn)        # the name it has in the body; NotStandalone says why it cannot come along
    text = body.source()            # the imports, then each definition under a '# from <module>' line

The walk, over each module's syntax tree (its source read once):

1. A function: its def, with every free name resolved where Python resolves it: the closure's cells (a literal,
   a function, a lambda), then the module's top-level statements, then builtins. Decorators that register it
   with kernelkit (``@op(...)``, ``@square.impl(...)``) are dropped; any other (``@triton.jit``) stays.
2. A module-level name: the statement that binds it (def, class, assignment) is copied and walked the same way;
   an import of an installed package (torch, triton, numpy, the standard library) stays an import; an import from
   kernelkit or from the user's own files is followed to the definition.
3. ``alias.attr``, where alias is a module that is followed (an op's lazy kernel module, or ``from
   kernelkit.backends import triton as kk_triton``), becomes the name that ``attr``'s definition gets.
4. A name wanted twice gets a suffix. Annotations become strings, as ``from __future__ import annotations`` would
   make them (a future import would break KernelBench's evaluator, which prepends lines to a solution), but
   Triton's ``tl.constexpr`` ones stay. A load_inline extension becomes torch's own load_inline, sources inlined.

What of kernelkit may come along is runs/carry.py's to say; anything else (an NVRTC kernel, a Numba launch, an
Op) raises NotStandalone, with the reason.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from kernelkit.runs.carry import NotStandalone, check_allowed, extension_call, followed_module, refuse, registers
from kernelkit.runs.syntax import (
    Module,
    annotations,
    bound_names,
    free_names,
    installed,
    literal,
    load_module,
)

__all__ = ["NotStandalone", "Standalone"]

Key = tuple[Any, ...]


@dataclass(frozen=True)
class _Alias:
    """A followed module: only ``alias.attr`` may use it."""

    module: str


@dataclass(frozen=True)
class _Unit:
    origin: str  # the module it comes from, for the '# from' line
    text: str


class Standalone:
    """One standalone module body under construction (see the module docstring)."""

    def __init__(self, reserved: dict[str, str | None]) -> None:
        """reserved: name -> installed module it is imported as ("torch": "torch"), or None for a name the caller
        defines itself (``ModelNew``); both stay out of the copied code's way."""
        self._names: dict[str, Key] = {}  # name in the body -> what it holds
        self._emitted: dict[Key, str] = {}
        self._imports: dict[Key, str] = {}  # key -> its import line
        self._units: list[_Unit] = []
        self._kept: list[Any] = []  # objects whose id() is a key: alive while the body is built
        self._modules: dict[str, Module] = {}
        self._theirs: dict[str, Key] = {}  # names another body gives its own definitions (see share_names_with)
        self.requires: set[str] = {"torch"}  # installed top-level packages the body imports
        for name, module in reserved.items():
            if module is None:
                self._claim(("caller", name), name)
            else:
                self._module_ref(module, name)

    # ---- the public face -------------------------------------------------------------------------------------

    def add(self, fn: Any) -> str:
        """Copy function ``fn`` and what it uses; its name in the body."""
        if not isinstance(fn, types.FunctionType):
            raise NotStandalone(f"{fn!r} is a {type(fn).__name__}, not a function whose source can be copied")
        return self._function(fn, fn.__name__)

    def share_names_with(self, other: Standalone) -> None:
        """Give what ``other`` also holds the name it has there, and nothing else any of its names: the two bodies
        can then run in one namespace (KernelBench execs a problem and its solution into one dict)."""
        self._theirs.update({name: key for key, name in other._emitted.items()})

    def define(self, wanted: str, expression: str) -> str:
        """A module-level ``name = expression`` of the caller's (names it uses must be in the body already)."""
        name = self._claim(("define", wanted, expression), wanted)
        self._units.append(_Unit("kernelkit export", f"{name} = {expression}"))
        return name

    def source(self) -> str:
        """The imports, then every definition in dependency order, grouped by the module it comes from."""
        lines = sorted(self._imports.values(), key=lambda line: (line.startswith("from "), line))
        parts = ["\n".join(lines)]
        origin = None
        for unit in self._units:
            if unit.origin != origin:
                origin = unit.origin
                parts.append(f"# ---- from {origin} " + "-" * max(4, 100 - len(origin)))
            parts.append(unit.text)
        return "\n\n\n".join(parts) + "\n"

    # ---- names ---------------------------------------------------------------------------------------------

    def _claim(self, key: Key, wanted: str) -> str:
        if key in self._emitted:
            return self._emitted[key]
        ours = [name for name, theirs in self._theirs.items() if theirs == key]
        name, n = (ours[0] if ours else wanted), 1
        while name in self._names or self._theirs.get(name, key) != key or not name.isidentifier():
            n += 1
            name = f"{wanted}_{n}"
        self._names[name] = key
        self._emitted[key] = name
        return name

    def _module_ref(self, module: str, wanted: str) -> str | _Alias:
        if not installed(module):
            return _Alias(module)
        key = ("module", module)
        if key not in self._emitted:
            name = self._claim(key, wanted)
            self._imports[key] = f"import {module}" if module == name else f"import {module} as {name}"
            self.requires.add(module.partition(".")[0])
        return self._emitted[key]

    def _from_ref(self, base: str, attr: str, wanted: str) -> str:
        key = ("from", base, attr)
        if key not in self._emitted:
            name = self._claim(key, wanted)
            self._imports[key] = f"from {base} import {attr}" + ("" if name == attr else f" as {name}")
            self.requires.add(base.partition(".")[0])
        return self._emitted[key]

    # ---- resolving a name ------------------------------------------------------------------------------------

    def _load(self, name: str) -> Module:
        if name not in self._modules:
            try:
                self._modules[name] = load_module(name)
            except (ImportError, OSError, TypeError, SyntaxError) as exc:
                raise NotStandalone(f"the source of module {name} cannot be read here ({exc})") from None
        return self._modules[name]

    def _name(self, mod: Module, name: str, cells: dict[str, Any] | None) -> str | _Alias | None:
        """What free name ``name`` of code in ``mod`` refers to: a name in the body, a followed module, or None
        (a builtin, or a name the module never binds, left as it is)."""
        if cells is not None and name in cells:
            return self._value(mod, name, cells[name])
        if name in mod.bindings:
            return self._global(mod, name)
        return None if hasattr(builtins, name) or name not in vars(mod.module) else self._unbound(mod, name)

    def _unbound(self, mod: Module, name: str) -> None:
        raise NotStandalone(f"{name} in {mod.name} is set by no statement of the module that can be copied")

    def _global(self, mod: Module, name: str) -> str | _Alias:
        stmt, alias = mod.bindings[name]
        value = getattr(mod.module, name, None)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return self._imported(mod, stmt, alias, name, value)
        special = self._special(mod.name, name, value)
        if special is not None:
            return special
        check_allowed(mod.name, name)
        if isinstance(stmt, ast.Assign) and not (len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return self._shared_statement(mod, stmt, name)
        key = ("def", mod.name, name)
        if key in self._emitted:
            return self._emitted[key]
        emitted = self._claim(key, name)
        self._units.append(_Unit(mod.label, self._copy(mod, stmt, None, rename=(name, emitted))))
        return emitted

    def _shared_statement(self, mod: Module, stmt: ast.Assign, name: str) -> str:
        """``a, b = ...`` or ``a = b = ...``: copied once, its names kept as they are."""
        key = ("stmt", mod.name, stmt.lineno)
        if key not in self._emitted:
            for bound in bound_names(stmt):
                if self._claim(("def", mod.name, bound), bound) != bound:
                    raise NotStandalone(f"{bound} (in {mod.name}, line {stmt.lineno}) clashes with another name of "
                                        "the same spelling and is set with other names at once")
            self._emitted[key] = name
            self._units.append(_Unit(mod.label, self._copy(mod, stmt, None)))
        return self._emitted[("def", mod.name, name)]

    def _imported(self, mod: Module, stmt: ast.stmt, alias: ast.alias, name: str, value: Any) -> str | _Alias:
        if isinstance(value, types.ModuleType):
            return self._module_ref(value.__name__, name)
        if followed_module(value) is not None:
            return _Alias(followed_module(value))  # type: ignore[arg-type]
        if isinstance(stmt, ast.Import):  # `import a.b` binds a: the package itself
            return self._module_ref(alias.name.partition(".")[0], name)
        assert isinstance(stmt, ast.ImportFrom)
        base = importlib.util.resolve_name("." * stmt.level + (stmt.module or ""), mod.module.__package__ or "")
        if installed(base):
            return self._from_ref(base, alias.name, name)
        source = self._load(base)
        if alias.name not in source.bindings:
            raise NotStandalone(f"{name} (from {base} in {mod.name}) is set by no statement of {base}")
        return self._global(source, alias.name)

    def _value(self, mod: Module, name: str, value: Any) -> str | _Alias | None:
        """A closure cell's value: a function, a lambda, a module, something written as a literal, or an object
        that a module-level name of the closure's module holds (a class, a table of configs)."""
        if isinstance(value, types.FunctionType):
            return self._function(value, name)
        if isinstance(value, types.ModuleType):
            return self._module_ref(value.__name__, name)
        special = self._special(mod.name, name, value)
        if special is not None:
            return special
        text = literal(value)
        if text is None:
            held = [g for g, v in vars(mod.module).items() if v is value and g in mod.bindings]
            if held:
                return self._global(mod, held[0])
            raise NotStandalone(f"{name} (a {type(value).__name__} captured from {mod.name}) cannot be written as "
                                "source")
        key = ("cell", id(value), text)
        self._kept.append(value)
        if key not in self._emitted:
            emitted = self._claim(key, name)
            self._units.append(_Unit(mod.label, f"{emitted} = {text}"))
        return self._emitted[key]

    def _special(self, module: str, name: str, value: Any) -> str | _Alias | None:
        """A value kernelkit made: a lazy kernel module is followed, a load_inline extension rewritten; an Op or a
        kernel launched by kernelkit cannot come along (NotStandalone). None for any other value."""
        followed = followed_module(value)
        if followed is not None:
            return _Alias(followed)
        refuse(module, name, value)
        key = ("def", module, name)
        if key in self._emitted:
            return self._emitted[key]
        call = extension_call(value, "@loader@")
        if call is None:
            return None
        loader = self._module_ref("torch.utils.cpp_extension", "cpp_extension")
        emitted = self._claim(key, name)
        self._units.append(_Unit(module, f"{emitted} = " + call.replace("@loader@", str(loader), 1)))
        return emitted

    # ---- functions -----------------------------------------------------------------------------------------

    def _function(self, fn: types.FunctionType, wanted: str) -> str:
        mod = self._load(fn.__module__)
        if "<locals>" not in fn.__qualname__ and mod.bindings.get(fn.__name__) is not None and \
                getattr(mod.module, fn.__name__, None) is fn:
            found = self._global(mod, fn.__name__)
            assert isinstance(found, str)
            return found
        key = ("fn", id(fn))
        if key in self._emitted:
            return self._emitted[key]
        self._kept.append(fn)
        check_allowed(mod.name, fn.__qualname__)
        node = mod.def_node(fn)
        if node is None:
            raise NotStandalone(f"the source of {fn.__qualname__} in {mod.name} cannot be found (did its file change "
                                "since it was imported? then import it again)")
        cells = dict(zip(fn.__code__.co_freevars, [c.cell_contents for c in fn.__closure__ or ()], strict=True))
        if isinstance(node, ast.Lambda):
            emitted = self._claim(key, wanted if wanted != "<lambda>" else "fn")
            text = self._copy(mod, node, cells)
            self._units.append(_Unit(mod.label, f"{emitted} = (\n{textwrap.indent(text.strip(), '    ')}\n)"))
            return emitted
        # A nested def's decorators ran in its enclosing function, whose names are gone: it is copied without.
        nested = "<locals>" in fn.__qualname__
        emitted = self._claim(key, fn.__name__ if fn.__name__.isidentifier() else fn.__code__.co_name)
        text = self._copy(mod, node, cells, rename=(fn.__code__.co_name, emitted), undecorated=nested)
        self._units.append(_Unit(mod.label, text))
        return emitted

    def _copy(self, mod: Module, node: ast.AST, cells: dict[str, Any] | None,
              rename: tuple[str, str] | None = None, undecorated: bool = False) -> str:
        """Statement (or lambda) ``node`` of ``mod`` as text, its free names resolved and rewritten; kernelkit's
        registering decorators are dropped (all of them with ``undecorated``)."""
        try:
            return self._copy_checked(mod, node, cells, rename, undecorated)
        except ValueError as exc:  # the source and its syntax tree disagree on a position
            raise NotStandalone(str(exc)) from None

    def _copy_checked(self, mod: Module, node: ast.AST, cells: dict[str, Any] | None,
                      rename: tuple[str, str] | None, undecorated: bool) -> str:
        edits: list[tuple[int, int, str]] = []
        decorators = getattr(node, "decorator_list", [])
        dropped = [d for d in decorators if undecorated or self._registers(mod, d, cells)]
        kept = [d for d in decorators if not any(d is x for x in dropped)]
        first = min([node.lineno, *(d.lineno for d in kept)])  # type: ignore[attr-defined]
        for d in dropped:  # below the first line copied: whole lines, from the line's start to the next line's
            if d.lineno > first:
                edits.append((mod.offset(d.lineno, 0), mod.offset(d.end_lineno + 1, 0), ""))  # type: ignore[operator]
        # Annotations become strings, but Triton's constexpr ones stay expressions: its interpreter compiles the
        # kernel's source again under `from __future__ import annotations`, which would quote a string twice.
        typed, names = [], free_names(node, skip=dropped)
        for annotation in annotations(node):
            start, end = mod.span(annotation)
            text = mod.data[start:end].decode()
            if "constexpr" in text:
                names += free_names(annotation)
            else:
                typed.append((start, end, repr(" ".join(text.split()))))
        for name_node in names:
            ref = self._name(mod, name_node.id, cells)
            if isinstance(ref, _Alias):
                edits.append(self._attribute(mod, name_node, ref))
            elif ref is not None and ref != name_node.id:
                edits.append((*mod.span(name_node, name_node.id), ref))
        edits += typed
        if rename is not None and rename[0] != rename[1]:
            edits.append(self._renamed(mod, node, *rename))
        self._no_kernelkit_imports(mod, node)
        start = mod.offset(first, 0) if not isinstance(node, ast.Lambda) else mod.span(node)[0]
        end = mod.span(node)[1]
        return textwrap.dedent(mod.edited(start, end, edits))

    def _attribute(self, mod: Module, name_node: ast.Name, alias: _Alias) -> tuple[int, int, str]:
        parent = mod.parents.get(name_node)
        if not isinstance(parent, ast.Attribute) or parent.value is not name_node:
            raise NotStandalone(f"{name_node.id} (line {name_node.lineno} of {mod.name}) is module {alias.module} "
                                "used as a value; only its attributes can be copied")
        target = self._load(alias.module)
        if parent.attr not in target.bindings:
            raise NotStandalone(f"{alias.module}.{parent.attr} is set by no statement of {alias.module}")
        found = self._global(target, parent.attr)
        if isinstance(found, _Alias):
            raise NotStandalone(f"{name_node.id}.{parent.attr} in {mod.name} is a module: name what it holds")
        return (*mod.span(parent), found)

    def _renamed(self, mod: Module, node: ast.AST, old: str, new: str) -> tuple[int, int, str]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            line = mod.line(node.lineno)
            match = re.search(rf"\b(def|class)\s+({re.escape(old)})\b", line)
            if match is None:
                raise NotStandalone(f"cannot find the name of {old} on line {node.lineno} of {mod.name}")
            start = mod.offset(node.lineno, len(line[: match.start(2)].encode()))
            return start, start + len(old.encode()), new
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if not isinstance(target, ast.Name):
            raise NotStandalone(f"{old} in {mod.name} (line {getattr(node, 'lineno', '?')}) cannot be renamed")
        return (*mod.span(target, old), new)

    def _registers(self, mod: Module, decorator: ast.expr, cells: dict[str, Any] | None) -> bool:
        """Whether ``decorator`` registers the function with kernelkit (kk.op, op(...), some_op.impl(...))."""
        expr = decorator.func if isinstance(decorator, ast.Call) else decorator
        chain = []
        while isinstance(expr, ast.Attribute):
            chain.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return False
        value = (cells or {}).get(expr.id, vars(mod.module).get(expr.id))
        for attr in reversed(chain):
            value = getattr(value, attr, None)
        return registers(value)

    def _no_kernelkit_imports(self, mod: Module, node: ast.AST) -> None:
        """Imports inside function bodies stay as they are: each must be of an installed package."""
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                names = [a.name for a in inner.names]
            elif isinstance(inner, ast.ImportFrom):
                names = [importlib.util.resolve_name("." * inner.level + (inner.module or ""),
                                                     mod.module.__package__ or "")]
            else:
                continue
            for name in names:
                if not installed(name):
                    raise NotStandalone(f"it imports {name} at run time (line {inner.lineno} of {mod.name})")
                self.requires.add(name.partition(".")[0])


