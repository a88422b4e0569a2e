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

The map, in layers from the top down: a module imports from its own layer and those below it (tests/test_layers.py
reads every import statement and holds the code to this; no two modules import each other, even through others).

    cli/            the command line, one module per command group, thin: parse, call the library, draw
    demo/           the guided tour; kernelkit/__init__.py, this face: the public names, each loaded on first use
    runs/           the drivers: check.py (plan, run each case as a CheckJob, spread), bench.py (one loop over
                    (op, size, dtype) groups, strict or plain), strict.py / strict_bench.py (strict mode's judging
                    side), repeat.py, verdicts.py (a format's own verdicts), early.py (slow builds started first),
                    export.py with standalone.py, carry.py and syntax.py (an impl's own code copied into a file that
                    runs without kernelkit)
    scale/          beyond one worker: a run's groups over this host's GPUs (--gpus) or a Ray cluster (--ray)
    runner.py       Worker: isolated worker processes (a crash, hang or lost CUDA context ends one job, not the run);
                    what a worker sends back is data only (wire.py); pool.py holds workers outside a run: started
                    early while the target opens, or kept for the next run (reuse_workers())
    report/         every renderer: terminal tables, JSON/CSV, plots, the HTML report, the progress line
    doctor/         the machine self-test
    jobs/           what runs inside a worker: CheckJob and judge() (the order of checks, written once), BenchJob,
                    strict mode's worker side (strict_worker.py, strict_bench.py, guards.py), progress news,
                    evidence.py (the determinism note and saved failing cases, for both paths)
    store/          SQLite results (db.py), run-to-run comparison and the regression gate (compare.py)
    profiling/      torch.profiler, ncu (+ its report readers), asm (asks each backend), codegen
    torch_ops.py    any impl as a torch.library operator
    target.py       open_target: prepare the process for the device, then resolve a target (a built-in op, a file,
                    a problem or task) once; cases; one case with its inputs
    formats/        outside problem formats (KernelBench, GPU MODE) as ops; each format's own verdict
    ops/            built-in ops: __init__.py (reference, cost, impls), triton.py, numba.py, cuda.cu
    backends/       one Backend per way to run an impl (eager, compile, triton, cuda, numba): the only code that
                    knows a backend by name; sass.py: what compiled kernels hold
    loading.py      import a source of ops once per process
    measure/        the timing engine: timer, the modes registry (modes.py), samplers, stats; ceilings.py (measured
                    and cached) and limits.py (where a result stands); host.py (the fingerprint); memory; l2.py
                    (persisting L2 lines reset before each cold sample)
    spec.py         Op, Impl, Case, CaseSetup: the data model; verify.py: comparison by the tolerance rule
    registry.py     backends by name (read by spec.py without importing any backend); results.py, values.py
                    (sizes, dtypes, tolerances), cache.py, units.py
    hygiene.py      what a case may leave in its worker; wire.py (data-only messages), channel.py (the frames
                    they and the jobs travel in), errors.py; deadline.py (a limit on the user code the calling
                    process runs itself)

One import runs up a layer, on purpose: ops.lowbit.module -> torch_ops (LowBitLinear, a built-in op's nn.Module,
is made of kk.torch_op operators; torch_ops opens targets by name, so it sits above the ops).

Timing modes (measure/modes.py) and backends (registry.py, backends/) are registries: a new one is one module and
one registration line. Where this differs from shared/DESIGN.md, and why: the loader is split (loading.py imports a
source, target.py resolves and prepares); profile runs in the calling process (it owns that process's profiler),
ncu in a child under ncu, asm's Triton compile in a child with the interpreter off: none is a worker job; store/
sits below report/ (report reads the store); doctor/ and demo/ are packages DESIGN.md did not plan.
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
