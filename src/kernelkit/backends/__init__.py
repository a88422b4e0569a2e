"""Backends: what each needs from the process, and whether an impl of it can run here.

Nothing here runs at import. ``prepare_process`` must be called before user code imports triton or numba
(the runner does it first thing in every worker, and the CLI before loading user files).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from kernelkit.errors import BackendUnavailable
from kernelkit.spec import Impl, Op, dtype_name


def prepare_process(device: str) -> None:
    """Set up this process for ``device`` before any kernel DSL is imported.

    On the CPU, Triton runs in its interpreter and Numba in its CUDA simulator; on a GPU both run for real.
    numba-cuda 0.30 still calls ``numpy.row_stack``, removed in numpy 2.5; ``vstack`` is the same function.
    """
    on_cpu = "1" if device == "cpu" else "0"
    os.environ["TRITON_INTERPRET"] = on_cpu
    os.environ["NUMBA_ENABLE_CUDASIM"] = on_cpu
    import numpy

    if not hasattr(numpy, "row_stack"):
        numpy.row_stack = numpy.vstack


def ensure_runnable(impl: Impl, dtype: torch.dtype, device: str) -> None:
    """Raise BackendUnavailable (the case is SKIPPED) or CompileError; return when the impl can run."""
    if impl.dtypes and dtype not in impl.dtypes:
        names = ", ".join(dtype_name(d) for d in impl.dtypes)
        raise BackendUnavailable(f"impl {impl.name!r} supports {names} only")
    if impl.backend == "triton":
        _require_triton(dtype, device)
    elif impl.backend == "numba":
        from kernelkit.backends import numba as numba_backend

        numba_backend.cuda_module()
    elif impl.backend == "cuda":
        _compile_then_require_gpu(impl, device)


def _require_triton(dtype: torch.dtype, device: str) -> None:
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailable(f"triton is not installed ({exc}); pip install 'kernelkit[triton]'") from None
    if device == "cpu" and dtype == torch.bfloat16:
        raise BackendUnavailable("the Triton interpreter computes bfloat16 wrongly; run bf16 cases with --device cuda")


def _compile_then_require_gpu(impl: Impl, device: str) -> None:
    built = [k.compile() for k in impl.kernels]  # a syntax error is caught even where nothing can run
    if device == "cuda":
        return
    where = "no GPU" if not torch.cuda.is_available() else "CUDA kernels run only with --device cuda"
    if not built:
        raise BackendUnavailable(f"{where} (the impl lists no kernels to compile)")
    raise BackendUnavailable(f"{where}; it compiled: {', '.join(_build_summary(b) for b in built)}")


def _build_summary(build: object) -> str:
    """'square_2d_kernel for sm_90 (nvrtc)': what was built, without timings that differ run to run."""
    name, arch, compiler = (getattr(build, attr, None) for attr in ("name", "arch", "compiler"))
    return f"{name} for {arch} ({compiler})" if name and arch and compiler else str(build)


def build_state(op: Op, impl: Impl) -> dict[str, Any]:
    """What the impl's builds looked like before a call, for ``build_details`` to tell what the call built."""
    state: dict[str, Any] = {}
    if impl.backend == "triton":
        from kernelkit.backends import triton as triton_backend

        state["autotune"] = triton_backend.autotune_state(impl.kernels)
    elif impl.backend == "compile":
        from kernelkit.backends import compiled

        state["compile_seconds"] = compiled.compile_seconds(op.name)
    return state


def build_details(op: Op, impl: Impl, before: dict[str, Any]) -> dict[str, Any]:
    """Autotuning (config chosen, seconds) and torch.compile time spent by the calls since ``build_state``."""
    details: dict[str, Any] = {}
    if "autotune" in before:
        from kernelkit.backends import triton as triton_backend

        tuning = triton_backend.autotune_details(impl.kernels, before["autotune"])
        if tuning:
            details["autotune"] = tuning
    if "compile_seconds" in before:
        from kernelkit.backends import compiled

        spent = compiled.compile_seconds(op.name) - before["compile_seconds"]
        if spent:
            details["compile_seconds"] = spent
    return details


def is_compile_error(exc: BaseException) -> bool:
    """Compiler errors raised by the kernel DSLs (Triton's CompilationError, Numba's TypingError, ...)."""
    for cls in type(exc).__mro__:
        module = cls.__module__ or ""
        if module.startswith("triton") and cls.__name__ in ("CompilationError", "CompileTimeAssertionFailure"):
            return True
        if module.startswith("numba") and cls.__name__ in ("TypingError", "LoweringError", "UnsupportedError"):
            return True
    return False


def cuda_context_lost() -> bool:
    """True when the CUDA context is unusable (a sticky error such as an illegal memory access)."""
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
    except Exception:  # noqa: BLE001 - any failure here means the context cannot be trusted
        return True
    return False
