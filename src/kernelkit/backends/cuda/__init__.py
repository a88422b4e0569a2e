"""CUDA C++ kernels: ``extern "C" __global__`` functions compiled with NVRTC and launched on torch tensors, and
torch extensions through ``load_inline``.

    square = cuda_kernel("square.cu", "square_kernel")     # beside the caller's .py; nothing compiled yet
    square.launch(*grid_1d(x.numel()), x, out, x.numel())   # compiles once (cached on disk), checks, launches

Compiling needs no GPU (NVRTC through cuda.core, else nvcc); launching does. Arguments are checked against the
kernel's C signature at every launch: a wrong dtype or a CPU tensor would otherwise give a silently wrong
answer or an illegal memory access.

kernel.py: ``cuda_kernel`` and ``CudaKernel``; build.py: compilers, the target arch, the cubin cache; signature.py:
the kernel's C parameters and their checks; inline.py, inline_check.py, inline_plan.py: ``load_inline`` built,
or checked where it cannot be loaded; grid.py: launch sizes; backend.py: the ``cuda`` backend; asm.py: PTX and
SASS of its kernels.
"""

from kernelkit.backends.cuda.build import DEFAULT_OPTIONS, default_arch
from kernelkit.backends.cuda.inline import InlineExtension, load_inline
from kernelkit.backends.cuda.inline_plan import BuiltExtension
from kernelkit.backends.cuda.kernel import CompiledKernel, CudaKernel, cuda_kernel, grid_1d, launch_dims
from kernelkit.backends.cuda.signature import Param, extern_c_kernels, kernel_params

__all__ = ["DEFAULT_OPTIONS", "BuiltExtension", "CompiledKernel", "CudaKernel", "InlineExtension", "Param",
           "cuda_kernel", "default_arch", "extern_c_kernels", "grid_1d", "kernel_params", "launch_dims", "load_inline"]
