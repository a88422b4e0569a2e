"""The built-in ops as plain data, for `kernelkit ops`: each op's description, dtypes, sizes and impls (backend,
dtypes, what each is). Building it imports torch and every op (a second or two); it is cached on disk keyed by the
ops' source files and the versions that shape it, so later listings answer without importing torch.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

from kernelkit import ops as ops_package
from kernelkit.cache import cache_dir, content_key, write_atomic
from kernelkit.ops import BUILTIN_OPS

CATALOG_VERSION = "1"  # bump when the shape of an entry changes


def catalog() -> list[dict[str, Any]]:
    """One dict per built-in op, in BUILTIN_OPS order (see ``_entry``); from the cache when it is current."""
    path = _cache_path()
    if path is not None:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_text())
    data = [_entry(name) for name in BUILTIN_OPS]
    if path is not None:
        with contextlib.suppress(OSError):
            write_atomic(path, json.dumps(data).encode())
    return data


def _cache_path() -> Path | None:
    """Where the catalog of these sources is cached; None when there is no usable cache directory."""
    here = Path(ops_package.__file__).resolve().parent
    stamps = [f"{p.relative_to(here)}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(here.rglob("*.py"))]
    versions = [_version(name) for name in ("kernelkit", "torch", "triton", "numba-cuda")]
    key = content_key(CATALOG_VERSION, *versions, *stamps)
    try:
        return cache_dir("catalog") / f"{key[:24]}.json"
    except OSError:
        return None


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _entry(name: str) -> dict[str, Any]:
    """name, description, dtypes, sizes (GPU), bench_sizes (GPU), cpu_sizes, and impls: name, backend, dtypes,
    description (the registered impls, then the compile baseline)."""
    from kernelkit.spec import dtype_name
    from kernelkit.target import open_target

    op = open_target(name, "cpu").op()
    dtypes = [dtype_name(d) for d in op.dtypes]
    return {
        "name": name, "description": op.description, "dtypes": dtypes,
        "sizes": [list(s) for s in op.sizes], "bench_sizes": [list(s) for s in op.bench_sizes_for("cuda")],
        "cpu_sizes": [list(s) for s in op.cpu_sizes],
        "impls": [{"name": impl.name, "backend": impl.backend, "description": impl.description,
                   "dtypes": [dtype_name(d) for d in impl.dtypes] or dtypes} for impl in op.all_impls().values()],
    }
