"""Backends: the registry of the ways an impl can run, and what the rest of kernelkit asks of them.

Each backend is a ``Backend`` (base.py) in its own module. The built-in ones are listed in ``BUILTIN`` (registry.py,
which the data model reads without importing any backend) by where they live and imported on first use; a user's
file can add one with ``register(MyBackend())`` before its impls are declared (a worker imports that file too, so
the backend is there as well).

Nothing here runs at import. ``prepare_process`` must be called before user code imports triton or numba: every
entry point does it by opening its target (``kernelkit.target.open_target``), and every worker first thing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernelkit.backends.base import Backend
from kernelkit.errors import BackendUnavailable
from kernelkit.registry import BUILTIN, backend, every_backend, names, register

if TYPE_CHECKING:
    import torch

    from kernelkit.spec import Impl, Op

__all__ = ["BUILTIN", "Backend", "backend", "baseline_impl", "build_details", "build_state", "cuda_context_lost",
           "ensure_runnable", "every_backend", "is_compile_error", "names", "prepare_process", "register"]


def prepare_process(device: str) -> None:
    """Set up this process for ``device`` before any kernel DSL is imported: each backend says what it needs.

    On the CPU, Triton runs in its interpreter and Numba in its CUDA simulator; on a GPU both run for real.
    """
    for each in every_backend():
        each.prepare_process(device)


def warm_up(device: str) -> None:
    """What a GPU worker's first job would wait for, done while the worker waits for that job (a worker started
    early waits while its runner opens and plans the run): torch._dynamo's import, which the first FLOP count on
    the meta device makes (pointwise ops' meta kernels are Python refs; 1-2 s), and cuBLAS's handle. Nothing on
    the CPU."""
    if device != "cuda":
        return
    import torch

    try:
        import torch._dynamo  # noqa: F401

        (torch.ones(16, 16, device="cuda") @ torch.ones(16, 16, device="cuda")).sum().item()
    except Exception:  # noqa: BLE001 - a warm-up only: the first job meets any real problem itself
        pass


def ensure_runnable(impl: Impl, dtype: torch.dtype, device: str) -> None:
    """Raise BackendUnavailable (the case is SKIPPED) or CompileError; return when the impl can run."""
    if impl.dtypes and dtype not in impl.dtypes:
        allowed = ", ".join(str(d).removeprefix("torch.") for d in impl.dtypes)
        raise BackendUnavailable(f"impl {impl.name!r} supports {allowed} only")
    backend(impl.backend).ensure_runnable(impl, dtype, device)


def build_state(op: Op, impl: Impl) -> dict[str, Any]:
    """What the impl's builds looked like before a call, for ``build_details`` to tell what the call built."""
    return backend(impl.backend).build_state(op, impl)


def build_details(op: Op, impl: Impl, before: dict[str, Any]) -> dict[str, Any]:
    """Autotuning (config chosen, seconds) and torch.compile time spent by the calls since ``build_state``."""
    return backend(impl.backend).build_details(op, impl, before)


def is_compile_error(exc: BaseException) -> bool:
    """Whether any backend calls ``exc`` its compiler's error (Triton's CompilationError, Numba's TypingError, ...):
    an impl of one backend may well launch another's kernels."""
    return any(each.is_compile_error(exc) for each in every_backend())


def baseline_impl(name: str, op: Op) -> Impl | None:
    """The baseline impl ``name`` (eager, compile) derived from ``op``'s reference by the backend of that name."""
    return backend(name).baseline_impl(op) if name in names() else None


def cuda_context_lost() -> bool:
    """True when the CUDA context is unusable (a sticky error such as an illegal memory access)."""
    import torch

    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
    except Exception:  # noqa: BLE001 - any failure here means the context cannot be trusted
        return True
    return False
