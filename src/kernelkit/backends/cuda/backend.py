"""The ``cuda`` backend: CUDA C++ kernels (NVRTC, load_inline) are compiled wherever an impl is checked, so a build
error is caught without a GPU, and run only on one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from kernelkit.backends.base import AsmKernels, Backend
from kernelkit.errors import BackendUnavailable, SpecError

if TYPE_CHECKING:
    from kernelkit.spec import CaseSetup, Impl

TRITON_IRS = ("ttir", "ttgir", "llir")


class CudaBackend(Backend):
    """CUDA C++ kernels listed in an impl's ``kernels=[...]``: ``cuda_kernel`` (NVRTC) or ``load_inline``."""

    name = "cuda"
    description = "CUDA C++ kernels (NVRTC or torch's load_inline)"
    packages = {"cuda_core": "cuda-core"}

    def runs_on(self, device: str) -> bool:
        return device == "cuda"

    def ensure_runnable(self, impl: Impl, dtype: torch.dtype, device: str) -> None:
        """Compile every listed CUDA kernel (a syntax error is caught even where nothing can run); SKIPPED without
        a GPU, saying what compiled. A dispatcher's kernels of another backend (Triton's) build at their first
        launch, as in their own impls."""
        built = [k.compile() for k in impl.kernels if callable(getattr(k, "compile", None))]
        if device == "cuda":
            return
        where = "no GPU" if not torch.cuda.is_available() else "CUDA kernels run only with --device cuda"
        if not built:
            raise BackendUnavailable(f"{where} (the impl lists no kernels to compile)")
        counts: dict[str, int] = {}  # builds of one kernel with other -D options share a summary
        for b in built:
            counts[_build_summary(b)] = counts.get(_build_summary(b), 0) + 1
        said = ", ".join(text if n == 1 else f"{n} builds of {text}" for text, n in counts.items())
        raise BackendUnavailable(f"{where}; it compiled: {said}")

    def early_builds(self, impl: Impl, device: str) -> list[Any]:
        """load_inline extensions on a GPU: nvcc over torch's headers takes half a minute to minutes when not
        cached (an NVRTC kernel compiles in well under a second, and without a GPU nothing is loaded)."""
        from kernelkit.backends.cuda.inline import InlineExtension

        return [k for k in impl.kernels if isinstance(k, InlineExtension)] if device == "cuda" else []

    def asm(self, case: CaseSetup, arch: str, ir: str, config: int | None) -> AsmKernels:
        if ir in TRITON_IRS:
            raise SpecError(f"{ir} is a Triton IR; CUDA C++ kernels have ptx and sass")
        from kernelkit.backends.cuda.asm import cuda_kernels

        return cuda_kernels(case, arch)


def _build_summary(build: object) -> str:
    """'square_2d_kernel for sm_90 (nvrtc)': what was built, without timings that differ run to run."""
    name, arch, compiler = (getattr(build, attr, None) for attr in ("name", "arch", "compiler"))
    return f"{name} for {arch} ({compiler})" if name and arch and compiler else str(build)
