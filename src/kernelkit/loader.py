"""Find ops: a built-in op by name, or every op defined in a user's Python file."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import torch

from kernelkit.errors import LoadError, SpecError
from kernelkit.ops import BUILTIN_OPS
from kernelkit.spec import Case, Op, Size, dtype_name

_loaded: dict[str, dict[str, Op]] = {}


def resolve(target: str) -> str:
    """An op name or file path as typed by the user -> a source: a module name or an absolute file path."""
    path = Path(target).expanduser()
    if target.endswith(".py") or os.sep in target or path.exists():
        if not path.is_file():
            raise LoadError(f"no such file: {target!r}; give a built-in op ({', '.join(BUILTIN_OPS)}) or a .py file")
        return str(path.resolve())
    if target in BUILTIN_OPS:
        return BUILTIN_OPS[target]
    raise LoadError(f"unknown op {target!r}; built-in ops: {', '.join(BUILTIN_OPS)}; or give the path of a .py file")


def load(source: str) -> dict[str, Op]:
    """Import ``source`` once per process and return its ops by name."""
    if source not in _loaded:
        module = _import_file(source) if source.endswith(".py") else importlib.import_module(source)
        ops = {v.name: v for v in vars(module).values() if isinstance(v, Op)}
        if not ops:
            raise LoadError(f"{source} defines no op; decorate a reference function with @kernelkit.op(...)")
        _loaded[source] = ops
    return _loaded[source]


def ops_of(target: str, source: str) -> list[Op]:
    """The ops ``target`` names: a built-in name is that one op (its module may define more); a file, all of them."""
    ops = load(source)
    if target in BUILTIN_OPS and target in ops:
        return [ops[target]]
    return list(ops.values())


def find_op(target: str, name: str | None = None) -> Op:
    """Op ``name`` of ``target`` (a built-in op name or a .py file); a built-in name or a file of one op needs none."""
    ops = load(resolve(target))
    if name is None and target in ops:
        return ops[target]
    if name is None and len(ops) == 1:
        return next(iter(ops.values()))
    if name is None:
        raise LoadError(f"{target} defines {len(ops)} ops ({', '.join(ops)}); name the one you mean")
    if name not in ops:
        raise LoadError(f"no op {name!r} in {target}; ops there: {', '.join(ops)}")
    return ops[name]


def _import_file(path: str) -> object:
    digest = hashlib.sha256(path.encode()).hexdigest()[:10]
    name = f"kernelkit_user_{Path(path).stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, pickling and Triton's source lookup need the module registered
    folder = str(Path(path).parent)
    if folder not in sys.path:
        sys.path.append(folder)  # the file may import modules that sit beside it, when loaded or when run
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        line = (exc.text or "").strip()
        raise LoadError(f"syntax error in {exc.filename}:{exc.lineno}: {exc.msg}\n    {line}") from None
    except Exception as exc:
        del sys.modules[name]
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
        where = f" (line {frames[-1].lineno})" if frames else ""
        raise LoadError(f"importing {path} failed{where}: {type(exc).__name__}: {exc}") from None
    return module


def make_cases(
    source: str,
    ops: Sequence[Op],
    device: str,
    impls: Sequence[str] = (),
    sizes: Sequence[Size] = (),
    dtypes: Sequence[torch.dtype] = (),
    seeds: int = 1,
) -> list[Case]:
    """Every (op, impl, size, dtype, seed) asked for. Unknown impl names are an error listing the known ones.

    No ``impls``: every registered impl. Baselines (``compile``) run when named in ``impls``.
    """
    if seeds < 1:
        raise SpecError(f"--seeds must be at least 1, got {seeds}")
    known = {name for op in ops for name in op.all_impls()}
    unknown = [name for name in impls if name not in known]
    if unknown:
        registered = ", ".join(sorted({name for op in ops for name in op.impls})) or "none"
        baselines = ", ".join(sorted({name for op in ops for name in op.baselines}))
        also = f"; baselines: {baselines}" if baselines else ""
        raise LoadError(f"unknown impl {', '.join(map(repr, unknown))}; impls here: {registered}{also}")
    cases = []
    for op in ops:
        chosen = [name for name in op.all_impls() if name in impls] if impls else list(op.impls)
        for impl in chosen:
            for size in sizes or op.sizes_for(device):
                for dtype in dtypes or op.dtypes:
                    for seed in range(seeds):
                        cases.append(Case(source, op.name, impl, tuple(size), dtype_name(dtype), seed))
    return cases
