"""A load_inline build, decided for this machine before anything is compiled: its sources, flags, target and key,
the tools torch's builder would use, and what a build gives back. Shared by the real build (inline.py), the
compile-only check (inline_check.py) and ``kernelkit asm`` (asm.py)."""

from __future__ import annotations

import os
import re
import shutil
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from kernelkit.backends.cuda.build import overridden
from kernelkit.errors import BackendUnavailable

DEFAULT_CUDA_HOME = Path("/usr/local/cuda")  # torch's last guess too, after $CUDA_HOME and nvcc on PATH
# What load_inline puts around the user's text (torch/utils/cpp_extension.py), reproduced for the compile-only check.
CPP_PRELUDE = "#include <torch/extension.h>"
CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>"
BINDINGS_FILE = "load_inline-bindings.cpp"  # what errors in the generated PYBIND11_MODULE block point at


@dataclass(frozen=True)
class BuiltExtension:
    """The result of ``InlineExtension.compile()``. ``module`` is None where nothing could be loaded (no GPU).

    arch: ``sm_XY`` built for (``host`` for a C++-only extension); seconds: to build, or to load from the cache.
    """

    name: str
    arch: str
    compiler: str
    seconds: float
    cached: bool
    module: ModuleType | None = field(default=None, repr=False)

    def __str__(self) -> str:
        what = "extension" if self.module is not None else f"compile-only check ({self.compiler}), nothing loaded"
        if self.cached:
            return f"{self.name}: {self.arch} {what} (from cache, {self.seconds:.2f} s)"
        by = f" by {self.compiler}" if self.module is not None else ""
        return f"{self.name}: {self.arch} {what}{by} in {self.seconds:.1f} s"


@dataclass(frozen=True)
class BuildPlan:
    """One build, decided for this machine: what load_inline (or the compile-only check) gets, and its key."""

    name: str
    key: str
    module: str  # the Python module name: unique per key, so two versions never collide in one process
    arch: str
    loadable: bool  # False: compile-only check (no GPU, or a CPU build of torch)
    cpp: list[str]  # the sources as load_inline gets them: each behind a #line pointing at its origin
    cuda: list[str]
    includes: list[str]  # the sources' own directories, so their "quoted" includes resolve in the build directory
    functions: tuple[str, ...]
    cflags: tuple[str, ...]
    cuda_cflags: tuple[str, ...]
    std: str  # -std=c++17 or c++20, as torch's builder passes it


def torch_flags(plan: BuildPlan) -> tuple[list[str], list[str]]:
    """(defines, -I include flags) that compile the plan's sources as load_inline's build would, without linking."""
    from torch.utils import cpp_extension

    defines = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-DTORCH_EXTENSION_NAME={plan.module}"]
    torch_includes = cpp_extension.include_paths()
    if not any(Path(d, "c10/cuda/impl/cuda_cmake_macros.h").is_file() for d in torch_includes):
        # A CPU build of torch ships c10/cuda's headers without this generated one; off Windows it only sets
        # export macros, and c10 has a switch for doing without it.
        defines.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    includes = [f"-I{d}" for d in [*torch_includes, sysconfig.get_paths()["include"], *plan.includes]]
    return defines, includes


# ---- tools: the C++ standard and nvcc, found as torch's builder finds them ----------------------------------------


@cache
def cxx_standard() -> str:
    """The -std torch's own extension builder passes (c++17 in older torch, c++20 in 2.13, whose headers warn under
    c++17), read from its ninja-file writer so the check compiles as the real build does."""
    from torch.utils import cpp_extension

    text = Path(cpp_extension.__file__).read_text(encoding="utf-8", errors="replace")
    found = re.search(r"\['-fPIC', '-std=(c\+\+\d+)'\]", text)
    return f"-std={found[1] if found else 'c++17'}"


def std_flags(std: str, user: Sequence[str]) -> list[str]:
    return [] if overridden(std, user) else [std]


def find_nvcc(loadable: bool) -> Path:
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
