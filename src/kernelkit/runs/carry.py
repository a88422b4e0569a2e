"""What of kernelkit an exported file can carry (runs/standalone.py copies code; this says what may come along).

kernelkit's own code is copied only from its ops and the modules in INLINABLE: pure helpers (Triton's do_bench,
grid sizes, seeded inputs, error classes). Values kernelkit made are handled one by one: a lazy kernel module is
followed like any module, a load_inline extension becomes torch's own load_inline with its sources inlined, and
an Op or a kernel that kernelkit compiles and launches (NVRTC, Numba) cannot come along.
"""

from __future__ import annotations

import types
from typing import Any

from kernelkit import spec
from kernelkit.backends.cuda import CudaKernel, InlineExtension
from kernelkit.backends.lazy import KernelModule, LazyKernel
from kernelkit.errors import SpecError
from kernelkit.runs.syntax import raw_string

# kernelkit modules whose code may be copied: every name (None), or the (qual)names listed.
INLINABLE: dict[str, frozenset[str] | None] = {
    "kernelkit.backends.triton.bench": None,
    "kernelkit.backends.cuda.grid": None,
    "kernelkit.values": None,
    "kernelkit.errors": frozenset({"KernelkitError", "SpecError", "BackendUnavailable", "LaunchError"}),
    "kernelkit.spec": frozenset({"_default_inputs.<locals>.make", "_shaped_inputs.<locals>.make", "input_shapes"}),
}
# What the code of other kernelkit modules does, where its name alone would not say why it cannot come along.
_WHY = {
    "kernelkit.backends.cuda.kernel": "a CUDA C++ kernel compiled by NVRTC and launched by kernelkit (cuda_kernel)",
    "kernelkit.backends.numba": "a Numba kernel launched through kernelkit",
    "kernelkit.backends.compiled": "kernelkit's torch.compile baseline",
}


class NotStandalone(SpecError):
    """A function needs kernelkit (or something that cannot be written as source) at run time."""


def check_allowed(module: str, name: str) -> None:
    """NotStandalone unless the code of ``name`` (a qualname) in ``module`` may be copied."""
    if module.partition(".")[0] != "kernelkit" or module.startswith("kernelkit.ops."):
        return
    names = INLINABLE.get(module, frozenset())
    if module in INLINABLE and (names is None or name in names):
        return
    why = _WHY.get(module, "kernelkit's own code, which an exported file cannot carry")
    raise NotStandalone(f"it uses {name} from {module}: {why}")


def followed_module(value: Any) -> str | None:
    """The module a lazy kernel module stands for (its attributes are copied like any module's), else None."""
    return value.module_name if isinstance(value, KernelModule) else None


def refuse(module: str, name: str, value: Any) -> None:
    """NotStandalone for values kernelkit made that cannot come along: an Op, a kernel it launches."""
    if isinstance(value, spec.Op):
        raise NotStandalone(f"it uses op {value.name!r} itself ({name} in {module}), a kernelkit Op")
    kernel = _kernel_in(value)
    if kernel is not None:
        raise NotStandalone(f"it launches CUDA kernel {kernel.name!r} ({name} in {module}) through kernelkit: "
                            f"{_WHY['kernelkit.backends.cuda.kernel']}")
    if isinstance(value, LazyKernel):
        raise NotStandalone(f"{name} in {module} is a lazy kernel handle of kernelkit's")


def extension_call(ext: InlineExtension, loader: str) -> str | None:
    """``loader.load_inline(...)`` (loader: torch.utils.cpp_extension's name) building ``ext`` from its own sources
    and flags, when ``ext`` is a load_inline extension; None for any other value."""
    if not isinstance(ext, InlineExtension):
        return None
    if ext._included(ext._cpp) or ext._included(ext._cuda):
        raise NotStandalone(f"load_inline extension {ext.name!r} includes headers of its own folder")
    listed = {"cpp_sources": [s.text for s in ext._cpp], "cuda_sources": [s.text for s in ext._cuda]}
    args = [f"    name={ext.name!r},"]
    for arg, texts in listed.items():
        if texts:
            args.append(f"    {arg}=[" + ", ".join(raw_string(t) for t in texts) + "],")
    args += [f"    functions={list(ext.functions)!r},", f"    extra_cflags={list(ext.extra_cflags)!r},",
             f"    extra_cuda_cflags={list(ext.extra_cuda_cflags)!r},", "    verbose=False,"]
    return f"{loader}.load_inline(\n" + "\n".join(args) + "\n)"


def registers(value: Any) -> bool:
    """Whether a decorator's callable ``value`` registers a function with kernelkit (op, some_op.impl)."""
    return value is spec.op or isinstance(getattr(value, "__self__", None), spec.Op)


def _kernel_in(value: Any) -> CudaKernel | None:
    """A CudaKernel that ``value`` is or holds (in a dict, list or tuple, or a field of an object), else None."""
    if isinstance(value, CudaKernel):
        return value
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif hasattr(value, "__dict__") and not isinstance(value, (type, types.ModuleType, types.FunctionType)):
        items = list(vars(value).values())
    else:
        return None
    for item in items:
        if isinstance(item, CudaKernel):
            return item
        if isinstance(item, (list, tuple, dict)):
            found = _kernel_in(item)
            if found is not None:
                return found
    return None
