"""The Triton backend: the interpreter on the CPU, its compiler's errors, what autotuning chose, and its kernels'
PTX/SASS for a GPU target (compiled in a child process, asm.py)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from kernelkit import registry
from kernelkit.backends.base import AsmKernels, Backend
from kernelkit.backends.triton.autotune import autotune_details, autotune_state
from kernelkit.errors import BackendUnavailable

if TYPE_CHECKING:
    from kernelkit.spec import CaseSetup, Impl, Op

COMPILE_ERRORS = ("CompilationError", "CompileTimeAssertionFailure")  # triton.compiler.errors, by class name


class TritonBackend(Backend):
    """``@triton.jit`` kernels: compiled for the GPU, or run in Triton's interpreter on the CPU."""

    name = "triton"
    description = "Triton kernels (the interpreter on the CPU)"
    cpu_stand_in = registry.CPU_STAND_INS["triton"]
    packages = {"triton": "triton"}

    def prepare_process(self, device: str) -> None:
        """The interpreter on the CPU: TRITON_INTERPRET is read when triton is first imported."""
        os.environ["TRITON_INTERPRET"] = "1" if device == "cpu" else "0"

    def ensure_runnable(self, impl: Impl, dtype: torch.dtype, device: str) -> None:
        try:
            import triton  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable(f"triton is not installed ({exc}); pip install 'kernelkit[triton]'") from None
        if device == "cpu" and dtype == torch.bfloat16:
            raise BackendUnavailable("the Triton interpreter computes bfloat16 wrongly; run bf16 cases with "
                                     "--device cuda")

    def build_state(self, op: Op, impl: Impl) -> dict[str, Any]:
        return {"autotune": autotune_state(impl.kernels)}

    def build_details(self, op: Op, impl: Impl, before: dict[str, Any]) -> dict[str, Any]:
        tuning = autotune_details(impl.kernels, before.get("autotune", {}))
        return {"autotune": tuning} if tuning else {}

    def is_compile_error(self, exc: BaseException) -> bool:
        return any((cls.__module__ or "").startswith("triton") and cls.__name__ in COMPILE_ERRORS
                   for cls in type(exc).__mro__)

    def asm(self, case: CaseSetup, arch: str, ir: str, config: int | None) -> AsmKernels:
        """Compile the kernels one call of the impl launches for ``arch`` (in a child process with the
        interpreter off), then disassemble each."""
        from kernelkit.backends.sass import disassemble, kernel_asm
        from kernelkit.backends.triton.asm import compile_triton
        from kernelkit.spec import dtype_name

        builds = compile_triton(case.source, case.impl.name, op_name=case.op.name, size=case.size,
                                dtype=dtype_name(case.dtype), arch=arch, config=config)
        return [kernel_asm(b.name, disassemble(b.cubin), name=b.name, compiler=b.compiler, arch=arch,
                           listings=b.irs, ptxas_log=b.ptxas_log, details=b.details, cubin=b.cubin,
                           extra_shared=b.shared) for b in builds], []
