"""Import a source of ops once per process (a built-in op's module or a user's .py file) and return its ops.

The process must be prepared for its device first (backends.prepare_process: Triton's interpreter and Numba's
simulator are chosen when they are first imported): target.open_target does it before it loads, every worker and
every child that compiles does it as it starts.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

from kernelkit.errors import LoadError
from kernelkit.measure.count import counted
from kernelkit.spec import Op

_loaded: dict[str, dict[str, Op]] = {}


def load(source: str) -> dict[str, Op]:
    """Import ``source`` once per process and return its ops by name. The process must be prepared already (a
    worker, or after ``open_target``): ``source`` may import triton or numba. An op that declares no FLOPs gets
    them counted from its reference (measure.count)."""
    if source not in _loaded:
        module = _import_file(source) if source.endswith(".py") else importlib.import_module(source)
        ops = {v.name: counted(v) for v in vars(module).values() if isinstance(v, Op)}
        if not ops:
            raise LoadError(f"{source} defines no op; decorate a reference function with @kernelkit.op(...)")
        _loaded[source] = ops
    return _loaded[source]


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
    except (Exception, SystemExit) as exc:  # exit() at import is a failed import, never the command's exit
        del sys.modules[name]
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
        where = f" (line {frames[-1].lineno})" if frames else ""
        what = f"called exit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
        raise LoadError(f"importing {path} failed{where}: {what}") from None
    return module
