"""The compile-only check of a load_inline extension where none can be loaded (no GPU, or a CPU build of torch)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from kernelkit.backends.cuda.build import NVCC_TIMEOUT_S
from kernelkit.backends.cuda.inline_plan import (
    BINDINGS_FILE,
    CPP_PRELUDE,
    CUDA_PRELUDE,
    BuildPlan,
    BuiltExtension,
    find_nvcc,
    std_flags,
    torch_flags,
)
from kernelkit.cache import cache_dir, write_atomic
from kernelkit.errors import BackendUnavailable, CompileError


def check(plan: BuildPlan) -> BuiltExtension:
    """Compile without linking or loading; a success is remembered under the build's key.

    ``nvcc -cubin`` on the CUDA side (its front end type-checks host and device code alike, then ptxas runs; what it
    skips, cudafe++ and the host compiler going over torch's headers twice more, makes ``nvcc -c`` about 3x slower:
    50 s against 15 s for ops/square/inline.cu on 2 cores) alongside ``c++ -fsyntax-only`` on the C++ side and the
    generated bindings (~20 s: torch/extension.h).
    """
    marker = cache_dir("inline", plan.key) / "checked"
    compiler = "nvcc -cubin, c++ -fsyntax-only"
    if marker.is_file():
        return BuiltExtension(plan.name, plan.arch, compiler, 0.0, True)
    from torch.utils import cpp_extension

    defines, includes = torch_flags(plan)
    with tempfile.TemporaryDirectory(prefix="kernelkit-inline-") as tmp:
        commands = []
        if plan.cuda:
            source = Path(tmp, "cuda.cu")
            source.write_text("\n".join([CUDA_PRELUDE, *plan.cuda]), encoding="utf-8")
            flags = [*std_flags(plan.std, plan.cuda_cflags), *getattr(cpp_extension, "COMMON_NVCC_FLAGS", ())]
            commands.append([str(find_nvcc(False)), "-cubin", f"-arch={plan.arch}", *flags, *defines, *includes,
                             *plan.cuda_cflags, "-o", str(Path(tmp, "cuda.cubin")), str(source)])
        source = Path(tmp, "main.cpp")
        bindings = [f'm.def("{fn}", torch::wrap_pybind_function({fn}), "{fn}");' for fn in plan.functions]
        source.write_text("\n".join([CPP_PRELUDE, *plan.cpp, f'#line 1 "{BINDINGS_FILE}"',
                                     "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {", *bindings, "}"]), encoding="utf-8")
        cxx = os.environ.get("CXX", "c++")
        if shutil.which(cxx) is None:
            raise BackendUnavailable(f"no C++ compiler: {cxx!r} is not on PATH; install g++ (or set $CXX)")
        commands.append([cxx, "-fsyntax-only", "-x", "c++", *std_flags(plan.std, plan.cflags), *defines, *includes,
                         *plan.cflags, str(source)])
        _run_all(plan, commands, Path(tmp))
    write_atomic(marker, f"{compiler}\n".encode())
    return BuiltExtension(plan.name, plan.arch, compiler, 0.0, False)


def _run_all(plan: BuildPlan, commands: list[list[str]], tmp: Path) -> None:
    """Run ``commands`` side by side; the first to fail stops the others and becomes a CompileError."""
    logs = [tmp / f"{i}.log" for i in range(len(commands))]
    running: list[subprocess.Popen[bytes]] = []
    try:
        for command, log in zip(commands, logs):  # noqa: B905 - same length
            with log.open("wb") as out:
                running.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp))
        deadline = time.monotonic() + NVCC_TIMEOUT_S
        while not any(p.poll() for p in running) and any(p.returncode is None for p in running):
            if time.monotonic() > deadline:
                raise CompileError(f"load_inline {plan.name!r}: the compile-only check ran over {NVCC_TIMEOUT_S} s")
            time.sleep(0.05)
    finally:
        stopped = [p for p in running if p.poll() is None]
        for p in stopped:
            p.kill()
            p.wait()
    for command, process, log in zip(commands, running, logs):  # noqa: B905 - same length
        if process.returncode and process not in stopped:
            raise CompileError(f"load_inline {plan.name!r} failed to compile for {plan.arch} "
                               f"({Path(command[0]).name}, compile-only check)",
                               log.read_text(encoding="utf-8", errors="replace").strip())
