"""Numba: launch ``@cuda.jit`` kernels on torch tensors, on torch's current stream (the simulator on CPU)."""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from kernelkit import registry
from kernelkit.backends.base import Backend
from kernelkit.errors import BackendUnavailable, LaunchError

if TYPE_CHECKING:
    from kernelkit.spec import Impl

# Numba's compiler errors (numba.core.errors), by class name: importing numba to test isinstance would be heavy.
COMPILE_ERRORS = ("TypingError", "LoweringError", "UnsupportedError")


class NumbaBackend(Backend):
    """``@cuda.jit`` kernels: compiled for the GPU, or run in Numba's CUDA simulator on the CPU."""

    name = "numba"
    description = "Numba @cuda.jit kernels (the CUDA simulator on the CPU)"
    cpu_stand_in = registry.CPU_STAND_INS["numba"]
    packages = {"numba": "numba", "numba_cuda": "numba-cuda"}
    no_asm = ("kernelkit asm does not support Numba impls yet ({impl!r}): Numba builds PTX for a GPU it can see, "
              "and its CPU simulator has none; on a GPU, use the kernel's inspect_asm()")

    def prepare_process(self, device: str) -> None:
        """The simulator on the CPU (read when numba.cuda is first imported)."""
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if device == "cpu" else "0"
        _restore_row_stack()

    def ensure_runnable(self, impl: Impl, dtype: torch.dtype, device: str) -> None:
        cuda_module()

    def is_compile_error(self, exc: BaseException) -> bool:
        return any((cls.__module__ or "").startswith("numba") and cls.__name__ in COMPILE_ERRORS
                   for cls in type(exc).__mro__)


def _restore_row_stack() -> None:
    """numba-cuda 0.30 still calls ``numpy.row_stack``, removed in numpy 2.5; ``vstack`` is the same function."""
    import numpy

    if not hasattr(numpy, "row_stack"):
        numpy.row_stack = numpy.vstack


def cuda_module() -> ModuleType:
    """``numba.cuda``, imported on first use; BackendUnavailable (a SKIPPED reason) when it cannot be."""
    _restore_row_stack()
    try:
        from numba import cuda
    except Exception as exc:  # noqa: BLE001 - any import failure is a reason to skip, never a crash
        raise BackendUnavailable(
            f"numba.cuda cannot be imported ({type(exc).__name__}: {exc}); pip install 'kernelkit[numba]'"
        ) from None
    return cuda


def simulating() -> bool:
    """True when Numba runs kernels in its CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set for --device cpu)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def as_array(tensor: torch.Tensor) -> Any:
    """A Numba view of ``tensor`` sharing its memory: a device array on CUDA, a NumPy array in the simulator."""
    cuda = cuda_module()
    if tensor.device.type == "cuda":
        if tensor.dtype == torch.bfloat16:
            raise LaunchError("Numba has no bfloat16 arrays; view the tensor as torch.int16 or use another backend")
        return cuda.as_cuda_array(tensor.detach())
    if simulating():
        return tensor.detach().numpy()
    raise LaunchError(f"a tensor on {tensor.device} was passed to a Numba CUDA kernel; move it with .cuda()")


def launch(kernel: Any, grid: int | tuple[int, ...], block: int | tuple[int, ...], *args: Any) -> None:
    """``kernel[grid, block, stream](*args)`` with tensors turned into Numba arrays, on torch's current stream."""
    dims = [grid] if isinstance(grid, int) else list(grid)
    if any(d <= 0 for d in dims):
        raise LaunchError(f"grid {grid} has no blocks; skip the launch when there is no work")
    converted = [as_array(a) if isinstance(a, torch.Tensor) else a for a in args]
    cuda = cuda_module()
    on_gpu = any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args)
    if on_gpu:
        stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
        kernel[grid, block, stream](*converted)
    else:
        kernel[grid, block](*converted)
