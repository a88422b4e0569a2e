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

The map: data flows spec -> open target -> jobs -> store -> report, and each stage is a place in the tree.

    spec.py         Op (reference, inputs, cost, tolerance), Impl, Case; BASELINES (eager, compile), the one list
    backends/       one Backend per way to run an impl (eager, compile, triton, cuda, numba) + the registry; the
                    only code that knows a backend by name. lazy.py: an op's kernel modules, imported on first use
    target.py       open_target(target, device): prepare the process for the device, then import the op's file
                    (the import-ordering rule lives here and nowhere else); cases, one case with its inputs
    ops/<op>/       built-in ops: __init__.py (reference, cost, impls), triton.py, numba.py, cuda.cu
    jobs/           what runs in a worker: CheckJob (check.py, judge(): the order of checks), BenchJob and the
                    benchmark sweep (bench.py: bench_op), one Job protocol; strict mode: strict.py (references and
                    the verdict in the calling process), strict_worker.py (the impl's side), guards.py (what the
                    worker watches), strict_bench.py (the strict sweep)
    runner.py       isolated worker processes: a crash, hang or lost CUDA context ends one job, not the run
    scale/          beyond one worker: a run's (op, size, dtype) groups spread over this host's GPUs (--gpus,
                    shard.py) or run as Ray tasks (--ray, cluster.py), merged into one run
    verify.py       comparison by the tolerance rule, structure checks, weak-test probes
    results.py      Status and CaseResult: plain data every stage passes on
    measure/        the timing engine (timer, samplers, modes, stats), ceilings.py, host.py (the fingerprint),
                    memory.py (peak device memory of one call)
    profiling/      torch_profiler, ncu (+ the driver run under ncu), asm (+ sass.py), codegen (inductor's code)
    store/          SQLite results (db.py) and run-to-run comparison (compare.py)
    report/         every renderer: terminal tables, JSON/CSV, plots, the HTML report; roofline.py is where a case
                    sits between the bandwidth and compute ceilings, for all of them
    cli/            the command line, one module per command group, thin
    demo/, doctor/  the guided tour, and the machine self-test
    formats/        outside problem formats (KernelBench, GPU MODE) as ops: open_target turns a problem path (and its
                    solution) into a generated op file (formats.source_file); each format's own verdict (jobs.py)

Where this differs from shared/DESIGN.md, and why: the loader is part of target.py (finding a user's ops and
preparing the process for them are one step under one rule); jobs/ holds check and bench only, because profile runs
in the calling process (it owns that process's profiler), ncu in a child under ncu, and asm's Triton compile in a
child with the interpreter off: none of them is a worker job; each backend that can show its kernels keeps its asm
beside it (backends/triton/asm.py, backends/cuda/asm.py), profiling/asm.py only asks; results.py, errors.py and
cache.py are small modules every stage shares; demo/ and doctor/ are packages DESIGN.md did not plan.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported now, not on first use: kernelkit.doctor is also the name of a package, which a later import of one of its
# modules would bind here in place of the function. The package imports nothing heavy until doctor() runs.
from kernelkit.doctor import DoctorReport, doctor

if TYPE_CHECKING:  # for type checkers and editors: the same names, imported for real
    from kernelkit.backends.compiled import compile_seconds
    from kernelkit.backends.cuda import CudaKernel, InlineExtension, cuda_kernel, load_inline
    from kernelkit.errors import BackendUnavailable, CompileError, KernelkitError, LaunchError, LoadError, SpecError
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
    from kernelkit.results import CaseResult, RunReport, Status
    from kernelkit.runs.bench import SweepReport, bench_op
    from kernelkit.runs.check import check, run_cases
    from kernelkit.spec import Case, Impl, Op, op
    from kernelkit.torch_ops import torch_op

# Where each public name lives: imported on first use (PEP 562), so `import kernelkit` and the CLI start without
# importing torch; `from kernelkit import check` and `kk.check` work as plain imports would.
_PUBLIC: dict[str, tuple[str, str]] = {
    "compile_seconds": ("kernelkit.backends.compiled", "compile_seconds"),
    "CudaKernel": ("kernelkit.backends.cuda", "CudaKernel"),
    "InlineExtension": ("kernelkit.backends.cuda", "InlineExtension"),
    "cuda_kernel": ("kernelkit.backends.cuda", "cuda_kernel"),
    "load_inline": ("kernelkit.backends.cuda", "load_inline"),
    "BackendUnavailable": ("kernelkit.errors", "BackendUnavailable"),
    "CompileError": ("kernelkit.errors", "CompileError"),
    "KernelkitError": ("kernelkit.errors", "KernelkitError"),
    "LaunchError": ("kernelkit.errors", "LaunchError"),
    "LoadError": ("kernelkit.errors", "LoadError"),
    "SpecError": ("kernelkit.errors", "SpecError"),
    "SweepReport": ("kernelkit.runs.bench", "SweepReport"),
    "bench_op": ("kernelkit.runs.bench", "bench_op"),
    "Ceilings": ("kernelkit.measure.ceilings", "Ceilings"),
    "calibrate": ("kernelkit.measure.ceilings", "calibrate"),
    "BenchResult": ("kernelkit.measure.measurement", "BenchResult"),
    "Measurement": ("kernelkit.measure.measurement", "Measurement"),
    "bench": ("kernelkit.measure.timer", "bench"),
    "nvtx": ("kernelkit.profiling", "nvtx"),
    "AsmReport": ("kernelkit.profiling.asm", "AsmReport"),
    "asm": ("kernelkit.profiling.asm", "report_for"),
    "GeneratedCode": ("kernelkit.profiling.codegen", "GeneratedCode"),
    "codegen": ("kernelkit.profiling.codegen", "codegen"),
    "NcuReport": ("kernelkit.profiling.ncu", "NcuReport"),
    "ncu": ("kernelkit.profiling.ncu", "run_ncu"),
    "ProfileResult": ("kernelkit.profiling.torch_profiler", "ProfileResult"),
    "profile": ("kernelkit.profiling.torch_profiler", "profile"),
    "CaseResult": ("kernelkit.results", "CaseResult"),
    "Status": ("kernelkit.results", "Status"),
    "RunReport": ("kernelkit.results", "RunReport"),
    "check": ("kernelkit.runs.check", "check"),
    "run_cases": ("kernelkit.runs.check", "run_cases"),
    "Case": ("kernelkit.spec", "Case"),
    "Impl": ("kernelkit.spec", "Impl"),
    "Op": ("kernelkit.spec", "Op"),
    "op": ("kernelkit.spec", "op"),
    "torch_op": ("kernelkit.torch_ops", "torch_op"),
}

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


def __getattr__(name: str) -> Any:
    """The public name ``name``, imported from its module on first use (then kept in this module)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'kernelkit' has no attribute {name!r}")
    module, attr = _PUBLIC[name]
    owner = importlib.import_module(module)
    value = getattr(owner, attr) if hasattr(owner, attr) else importlib.import_module(f"{module}.{attr}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
