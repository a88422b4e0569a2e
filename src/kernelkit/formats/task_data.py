"""A GPU MODE task's specs and data as kernelkit sizes and inputs, and back.

Specs: a task.yml spec (``{"size": 16, "seed": 4242}``) is a kernelkit size, its values in key order
(``ShapeCodec``); ``label`` shows it as the task writes it, ``size=16 seed=4242``.

Data: ``generate_input`` returns anything GPU MODE's evaluator can clone (a tensor, or tuples, lists and dicts of
tensors and plain values, an output buffer among them). kernelkit judges tensors, so the data is spread into its
tensors, each one input (checked for writes, costed, sent to a strict worker as bytes), followed by one last input,
the data's layout as JSON text: where each tensor goes, the plain values, and the dtype generate_input gave each
tensor. ``gather`` rebuilds the data from those inputs in any process, the judging one or a worker that never
called generate_input (strict mode sends it the inputs only).

Seeds: a case seed other than 0 is combined with the spec's seed as eval.py combines its secret POPCORN_SEED
(``combine_seed``), so the task sees seeds like those of a leaderboard run, always below 2**63.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kernelkit.errors import SpecError
from kernelkit.spec import Size, dtype_name

# A secret seed below 2**31 combined with a spec seed below 2**31 stays below 2**63: an int64, which
# torch.Generator.manual_seed and the tasks' own seed arithmetic take.
SECRET_SEEDS = 2**31
SEED_LIMIT = 2**63


# Specs as sizes -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShapeCodec:
    """A task spec (a dict) <-> a kernelkit size (a tuple of non-negative ints), key by key."""

    keys: tuple[str, ...]
    tables: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # keys whose values are looked up by index
    bools: frozenset[str] = frozenset()

    @classmethod
    def of(cls, specs: Sequence[dict[str, Any]]) -> ShapeCodec:
        keys = tuple(dict.fromkeys(k for spec in specs for k in spec))
        tables, bools = {}, set()
        for key in keys:
            values = [spec.get(key) for spec in specs]
            if all(isinstance(v, bool) for v in values):
                bools.add(key)
            elif not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
                table: list[Any] = []  # by equality: a value may be a list (a group of shapes)
                for v in values:
                    if v not in table:
                        table.append(v)
                tables[key] = tuple(table)
        return cls(keys, tables, frozenset(bools))

    def encode(self, spec: dict[str, Any]) -> Size:
        size = []
        for key in self.keys:
            value = spec.get(key)
            size.append(self.tables[key].index(value) if key in self.tables else int(value))
        return tuple(size)

    def decode(self, size: Sequence[int]) -> dict[str, Any]:
        if len(size) != len(self.keys):
            raise SpecError(f"a size of this task has {len(self.keys)} numbers ({', '.join(self.keys)}), "
                            f"got {tuple(size)}")
        spec: dict[str, Any] = {}
        for key, value in zip(self.keys, size, strict=True):
            if key in self.tables:
                if not 0 <= value < len(self.tables[key]):
                    raise SpecError(f"{key} = {value} is not an index of its table {self.tables[key]}")
                if self.tables[key][value] is not None:
                    spec[key] = self.tables[key][value]
            else:
                spec[key] = bool(value) if key in self.bools else int(value)
        return spec

    def label(self, size: Sequence[int]) -> str:
        """The spec as the task writes it, ``size=16 seed=4242`` (``case=band``, ``groups=[2,3]``)."""
        try:
            spec = self.decode(size)
        except SpecError:
            return "x".join(map(str, size))
        return " ".join(f"{key}={_shown(value)}" for key, value in spec.items())

    def describe(self) -> str:
        text = f"size = ({', '.join(self.keys)})"
        for key, table in self.tables.items():
            text += f"; {key}: " + ", ".join(f"{i}={v!r}" for i, v in enumerate(table))
        return text


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)


def combine_seed(a: int, b: int) -> int:
    """eval.py's _combine: the spec's public seed ``a`` and a second seed ``b`` into one (a Cantor pairing). ``b`` is
    taken modulo SECRET_SEEDS, so for spec seeds below 2**31 the result stays below SEED_LIMIT (2**63)."""
    b %= SECRET_SEEDS
    return int(a + (a + b) * (a + b + 1) // 2)


# Data as inputs -------------------------------------------------------------------------------------------------

def clone_data(data: Any) -> Any:
    """A copy of ``data`` with every tensor cloned, through tuples, lists and dicts (as eval.py's _clone_data)."""
    if isinstance(data, (tuple, list)):
        return type(data)(clone_data(x) for x in data)
    if isinstance(data, dict):
        return {k: clone_data(v) for k, v in data.items()}
    return data.clone() if isinstance(data, torch.Tensor) else data


def to_device(data: Any, device: torch.device) -> Any:
    if isinstance(data, (tuple, list)):
        return type(data)(to_device(x, device) for x in data)
    if isinstance(data, dict):
        return {k: to_device(v, device) for k, v in data.items()}
    return data.to(device) if isinstance(data, torch.Tensor) and data.device != device else data


_PLAIN = (type(None), bool, int, float, str)


def spread(data: Any) -> tuple[Any, ...]:
    """``data`` as kernelkit's inputs: its tensors (and any value JSON cannot hold), in order, then its layout."""
    items: list[Any] = []

    def node(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            items.append(value)
            return {"tensor": len(items) - 1, "dtype": dtype_name(value.dtype)}
        if type(value) in (tuple, list):
            return {type(value).__name__: [node(v) for v in value]}
        if type(value) is dict and all(type(k) in (str, int) for k in value):
            return {"dict": [[k, node(v)] for k, v in value.items()]}
        if type(value) in _PLAIN:
            return {"value": value}
        items.append(value)  # another object: passed along as it is (a worker gets only its type's name)
        return {"object": len(items) - 1}

    layout = node(data)
    return (*items, json.dumps(layout))


def gather(inputs: Sequence[Any], native: bool = False) -> Any:
    """The data ``spread`` made ``inputs`` from. ``native``: each tensor back at the dtype generate_input gave it
    (kernelkit's float64 reference request runs the task's reference at the task's own precision)."""
    if not inputs or not isinstance(inputs[-1], str):
        raise SpecError("a GPU MODE task's inputs end with their layout (task_data.spread); got "
                        f"{type(inputs[-1]).__name__ if inputs else 'no inputs'}")
    items = inputs[:-1]

    def build(node: dict[str, Any]) -> Any:
        if "tensor" in node:
            x = items[node["tensor"]]
            want = getattr(torch, str(node.get("dtype", "")), None)
            if native and isinstance(x, torch.Tensor) and isinstance(want, torch.dtype) and x.dtype != want:
                return x.to(want)
            return x
        if "object" in node:
            return items[node["object"]]
        if "value" in node:
            return node["value"]
        if "dict" in node:
            return {k: build(v) for k, v in node["dict"]}
        kind = "tuple" if "tuple" in node else "list"
        built = [build(v) for v in node[kind]]
        return tuple(built) if kind == "tuple" else built

    return build(json.loads(inputs[-1]))


# Uninitialised memory -------------------------------------------------------------------------------------------

class _Unwritten(TorchFunctionMode):
    """Storages that generate_input made with torch.empty (or empty_like, new_empty ...) and never passed to anything
    that could write them: an output buffer, whose memory holds whatever the allocator last kept there."""

    EMPTY = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
    # Calls that neither write a tensor nor hand its memory to code torch cannot see (a .numpy() view, a
    # kernel given data_ptr()): a tensor passed to any other call counts as written.
    READS = frozenset({"contiguous", "view", "reshape", "size", "dim", "numel", "stride", "is_contiguous",
                       "element_size", "__get__", "__len__", "__repr__", "__format__"})

    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[int, torch.Tensor] = {}

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in self.EMPTY:
            if isinstance(out, torch.Tensor) and out.numel():
                self.storages[out.untyped_storage().data_ptr()] = out
        elif name not in self.READS:
            for x in [*args, *kwargs.values()]:
                for t in x if isinstance(x, list | tuple) else (x,):
                    if isinstance(t, torch.Tensor) and t.numel():
                        self.storages.pop(t.untyped_storage().data_ptr(), None)
        return out


def fill_unwritten(make: Any) -> Any:
    """``make()`` (a task's generate_input), with the tensors it returns uninitialised filled: NaN for floating
    dtypes, the largest value for integers, True for bools. Otherwise an output buffer made with torch.empty can
    hold a previous case's answer (the allocator hands back the block it was in), and a submission that returns
    the buffer untouched would pass; the judge would also send that answer to a strict worker."""
    with _Unwritten() as seen:
        data = make()
    unwritten = set(seen.storages)
    for t in spread(data)[:-1]:
        if isinstance(t, torch.Tensor) and t.numel() and t.untyped_storage().data_ptr() in unwritten:
            if t.is_floating_point() or t.is_complex():
                t.fill_(float("nan"))
            elif t.dtype == torch.bool:
                t.fill_(True)
            else:
                t.fill_(torch.iinfo(t.dtype).max)
    return data
