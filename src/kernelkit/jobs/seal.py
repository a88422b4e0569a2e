"""The seal on what the harness relies on: timers, comparisons, kernelkit's own functions and classes.

``Seal.take()`` (when kernelkit is imported, before any user code) records each object and, for a function, its
code, defaults and closure; ``tampered()`` names every one replaced since, or rewritten in place: a function whose
``__code__`` was swapped is the same object doing something else, so identity alone would not see it.

What it cannot promise: code in the same process can reach anything, the seal's own state included. The judging
process runs no submission code for a KernelBench or GPU MODE target (their solutions are imported only by the
worker that runs them); an op file that holds its impls beside its reference is imported there, and the README
says what that leaves open.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# What the harness calls while it times and judges, by dotted name; kernelkit's own modules are sealed whole.
HARNESS_NAMES = (
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.time", "time.sleep",
    "torch.equal", "torch.allclose", "torch.isclose", "torch.isnan", "torch.isfinite", "torch.isinf",
    "torch.testing.assert_close", "torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.current_stream",
    "torch.Tensor.__eq__", "torch.Tensor.__ne__", "torch.Tensor.__sub__", "torch.Tensor.abs", "torch.Tensor.to",
    "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.cpu", "torch.Tensor.equal", "torch.Tensor.all",
    "torch.Tensor.any", "torch.Tensor.max", "torch.Tensor.sum", "torch.Tensor.__bool__", "torch.Tensor.__float__",
    "gc.get_objects", "threading.Thread.start",
)


def _resolve(dotted: str) -> Any:
    module, _, rest = dotted.partition(".")
    obj: Any = sys.modules.get(module) or importlib.import_module(module)
    for part in rest.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _state(obj: Any) -> tuple[Any, ...]:
    """What a harness object is made of: the object, and for a function its code, defaults and closure contents
    (a function whose ``__code__`` was replaced is the same object doing something else)."""
    fn = getattr(obj, "__func__", obj)  # a bound method, classmethod or staticmethod: its function
    code = getattr(fn, "__code__", None)
    if code is None:
        return (obj,)
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            cells.append(_EMPTY)
    kwdefaults = getattr(fn, "__kwdefaults__", None) or {}
    return (obj, code, getattr(fn, "__defaults__", None), tuple(kwdefaults.items()), tuple(cells))


_EMPTY = object()


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Element by element identity, kwdefaults and closures included: no ``==`` a user's object could answer."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, tuple) and isinstance(y, tuple):
            if not _same(x, y):
                return False
        elif x is not y:
            return False
    return True


@dataclass
class Seal:
    """Every harness object at sealing time, down to its code; ``tampered()`` lists those that changed since."""

    objects: dict[str, Any] = field(default_factory=dict)
    states: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    members: dict[str, type] = field(default_factory=dict)  # a class's own method: name -> the class holding it

    @classmethod
    def take(cls) -> Seal:
        seal = cls()
        for name in HARNESS_NAMES:
            seal._add(name, _resolve(name))
        for name, module in list(sys.modules.items()):
            if (name == "kernelkit" or name.startswith("kernelkit.")) and module is not None:
                for attr, value in list(vars(module).items()):
                    if callable(value) and not attr.startswith("__"):
                        seal._add(f"{name}.{attr}", value)
                        if isinstance(value, type) and value.__module__ == name:  # its own methods, too
                            for method, member in vars(value).items():
                                member = getattr(member, "fget", member)  # a property: its getter
                                if hasattr(getattr(member, "__func__", member), "__code__"):
                                    seal._add(f"{name}.{attr}.{method}", member, value)
        return seal

    def _add(self, name: str, value: Any, owner: type | None = None) -> None:
        self.objects[name] = value
        self.states[name] = _state(value)
        if owner is not None:
            self.members[name] = owner

    def tampered(self) -> list[str]:
        """Names whose object is no longer the sealed one, or whose code, defaults or closure changed."""
        changed = []
        for name, original in self.objects.items():
            owner = self.members.get(name)
            now = _member(owner, name.rpartition(".")[2]) if owner is not None else _current(name)
            if (now is not original and not _same_method(now, original)) or not _same(_state(now), self.states[name]):
                changed.append(name)
        return changed


def _current(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    owner = _resolve(module) if module not in sys.modules else sys.modules[module]
    return getattr(owner, attr, None) if owner is not None else None


def _member(klass: type, attr: str) -> Any:
    """A class's own member as sealed: a property's getter, else the raw member (a classmethod, a function)."""
    member = vars(klass).get(attr)
    return getattr(member, "fget", member)


def _same_method(now: Any, original: Any) -> bool:
    """A bound method taken again is a new object around the same function."""
    return (now is not None and getattr(now, "__func__", None) is not None
            and getattr(now, "__func__", None) is getattr(original, "__func__", None)
            and getattr(now, "__self__", None) is getattr(original, "__self__", None))


def describe_tampering(names: Sequence[str], where: str) -> str:
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"{where} replaced {shown}: the harness's timers, comparisons and verdicts are not the impl's to change"
