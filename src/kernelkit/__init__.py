"""kernelkit: write a GPU kernel, check it against a PyTorch reference, and see where its time goes.

The public API is small::

    import kernelkit as kk

    @kk.op(sizes=[(4096, 4096)], dtypes=[torch.float32])
    def square(x):
        return x * x

    report = kk.check("my_kernels.py")     # or a built-in op name: kk.check("square")
    result = kk.profile("square", "triton_flat", size="4096x4096")   # torch.profiler table, trace, diagnosis
    kk.ncu("square", "triton_flat"); kk.asm("square", "cuda_vec4")   # Nsight Compute; PTX/SASS and resources

    m = kk.bench(torch.square, x)             # any callable: cold-L2 median with spread, n, how it stopped
    sweep = kk.bench_op("square")             # every impl vs eager and torch.compile, % of the calibrated ceiling
    kk.doctor()                               # can this machine's timings be trusted? a verdict per timing mode
"""

from kernelkit.backends.compiled import compile_seconds
from kernelkit.backends.cuda import CudaKernel, InlineExtension, cuda_kernel, load_inline
from kernelkit.doctor import DoctorReport, doctor
from kernelkit.errors import BackendUnavailable, CompileError, KernelkitError, LaunchError, LoadError, SpecError
from kernelkit.jobs.bench import SweepReport, bench_op
from kernelkit.measure.ceilings import Ceilings, calibrate
from kernelkit.measure.measurement import BenchResult, Measurement
from kernelkit.measure.timer import bench
from kernelkit.profiling import nvtx
from kernelkit.profiling.asm import AsmReport
from kernelkit.profiling.asm import report_for as asm
from kernelkit.profiling.codegen import GeneratedCode, codegen
from kernelkit.profiling.ncu import NcuReport
from kernelkit.profiling.ncu import run_ncu as ncu
from kernelkit.profiling.torch_profiler import ProfileResult, profile
from kernelkit.results import CaseResult, Status
from kernelkit.runner import RunReport, check, run_cases
from kernelkit.spec import Case, Impl, Op, op
from kernelkit.torch_ops import torch_op

__version__ = "0.1.0"

__all__ = [
    "AsmReport",
    "BenchResult",
    "Ceilings",
    "Measurement",
    "SweepReport",
    "BackendUnavailable",
    "Case",
    "CaseResult",
    "CompileError",
    "CudaKernel",
    "DoctorReport",
    "GeneratedCode",
    "Impl",
    "InlineExtension",
    "KernelkitError",
    "LaunchError",
    "LoadError",
    "NcuReport",
    "Op",
    "ProfileResult",
    "RunReport",
    "SpecError",
    "Status",
    "bench",
    "bench_op",
    "calibrate",
    "check",
    "codegen",
    "compile_seconds",
    "doctor",
    "cuda_kernel",
    "load_inline",
    "nvtx",
    "op",
    "profile",
    "run_cases",
    "asm",
    "ncu",
    "torch_op",
]
