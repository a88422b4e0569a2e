"""The compile-only check of a load_inline extension where none can be loaded (no GPU, or a CPU build of torch)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from kernelkit.backends.cuda.build import NVCC_TIMEOUT_S, _overridden
from kernelkit.cache import cache_dir, write_atomic
from kernelkit.errors import BackendUnavailable, CompileError

if TYPE_CHECKING:
    from kernelkit.backends.cuda.inline import BuiltExtension, _Plan

DEFAULT_CUDA_HOME = Path("/usr/local/cuda")  # torch's last guess too, after $CUDA_HOME and nvcc on PATH
# What load_inline puts around the user's text (torch/utils/cpp_extension.py), reproduced for the compile-only check.
_CPP_PRELUDE = "#include <torch/extension.h>"
_CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>"
_BINDINGS_FILE = "load_inline-bindings.cpp"  # what errors in the generated PYBIND11_MODULE block point at


def _check(plan: _Plan) -> BuiltExtension:
    """Compile without linking or loading; a success is remembered under the build's key.

    ``nvcc -cubin`` on the CUDA side (its front end type-checks host and device code alike, then ptxas runs; what it
    skips, cudafe++ and the host compiler going over torch's headers twice more, makes ``nvcc -c`` about 3x slower:
    50 s against 15 s for square_inline.cu on 2 cores) alongside ``c++ -fsyntax-only`` on the C++ side and the
    generated bindings (~20 s: torch/extension.h).
    """
    from kernelkit.backends.cuda.inline import BuiltExtension  # here: inline imports this module

    marker = cache_dir("inline", plan.key) / "checked"
    compiler = "nvcc -cubin, c++ -fsyntax-only"
    if marker.is_file():
        return BuiltExtension(plan.name, plan.arch, compiler, 0.0, True)
    from torch.utils import cpp_extension

    defines = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-DTORCH_EXTENSION_NAME={plan.module}"]
    torch_includes = cpp_extension.include_paths()
    if not any(Path(d, "c10/cuda/impl/cuda_cmake_macros.h").is_file() for d in torch_includes):
        # A CPU build of torch ships c10/cuda's headers without this generated one; off Windows it only sets
        # export macros, and c10 has a switch for doing without it.
        defines.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    includes = [f"-I{d}" for d in [*torch_includes, sysconfig.get_paths()["include"], *plan.includes]]
    with tempfile.TemporaryDirectory(prefix="kernelkit-inline-") as tmp:
        commands = []
        if plan.cuda:
            source = Path(tmp, "cuda.cu")
            source.write_text("\n".join([_CUDA_PRELUDE, *plan.cuda]), encoding="utf-8")
            flags = [*_std(plan.std, plan.cuda_cflags), *getattr(cpp_extension, "COMMON_NVCC_FLAGS", ())]
            commands.append([str(_nvcc(False)), "-cubin", f"-arch={plan.arch}", *flags, *defines, *includes,
                             *plan.cuda_cflags, "-o", str(Path(tmp, "cuda.cubin")), str(source)])
        source = Path(tmp, "main.cpp")
        bindings = [f'm.def("{fn}", torch::wrap_pybind_function({fn}), "{fn}");' for fn in plan.functions]
        source.write_text("\n".join([_CPP_PRELUDE, *plan.cpp, f'#line 1 "{_BINDINGS_FILE}"',
                                     "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {", *bindings, "}"]), encoding="utf-8")
        cxx = os.environ.get("CXX", "c++")
        if shutil.which(cxx) is None:
            raise BackendUnavailable(f"no C++ compiler: {cxx!r} is not on PATH; install g++ (or set $CXX)")
        commands.append([cxx, "-fsyntax-only", "-x", "c++", *_std(plan.std, plan.cflags), *defines, *includes,
                         *plan.cflags, str(source)])
        _run_all(plan, commands, Path(tmp))
    write_atomic(marker, f"{compiler}\n".encode())
    return BuiltExtension(plan.name, plan.arch, compiler, 0.0, False)


def _run_all(plan: _Plan, commands: list[list[str]], tmp: Path) -> None:
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


# ---- tools: the C++ standard and nvcc, found as torch's builder finds them ----------------------------------------


@cache
def _cxx_standard() -> str:
    """The -std torch's own extension builder passes (c++17 in older torch, c++20 in 2.13, whose headers warn under
    c++17), read from its ninja-file writer so the check compiles as the real build does."""
    from torch.utils import cpp_extension

    text = Path(cpp_extension.__file__).read_text(encoding="utf-8", errors="replace")
    found = re.search(r"\['-fPIC', '-std=(c\+\+\d+)'\]", text)
    return f"-std={found[1] if found else 'c++17'}"


def _std(std: str, user: Sequence[str]) -> list[str]:
    return [] if _overridden(std, user) else [std]


def _nvcc(loadable: bool) -> Path:
    """The nvcc a build uses: torch's CUDA_HOME when it builds for real; for the check, the same search torch makes
    ($CUDA_HOME, $CUDA_PATH, PATH, /usr/local/cuda). BackendUnavailable, saying what to install, if there is none."""
    if loadable:
        from torch.utils import cpp_extension

        roots = [cpp_extension.CUDA_HOME]
    else:
        on_path = shutil.which("nvcc")
        roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                 Path(on_path).parent.parent if on_path else None, DEFAULT_CUDA_HOME]
    found = next((Path(r, "bin", "nvcc") for r in roots if r and Path(r, "bin", "nvcc").is_file()), None)
    if found is None:
        raise BackendUnavailable(
            "load_inline needs nvcc, the CUDA toolkit's compiler, and found none in $CUDA_HOME, on PATH or in "
            f"{DEFAULT_CUDA_HOME}: install the CUDA toolkit (for torch's CUDA {torch.version.cuda or '12 or 13'}, "
            "e.g. apt install cuda-toolkit-13-0, or pip install nvidia-cuda-nvcc) and set CUDA_HOME to it")
    return found
