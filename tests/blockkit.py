"""CUDA matmul kernels' own source on CPU threads (fixtures/cuda_cpu): one std::thread per CUDA thread,
__syncthreads a std::barrier, cp.async emulated, so index math, edge masking, stage rotation and barrier placement
are checked without a GPU. The kernel file's inline PTX helpers are swapped for the emulator's functions, the
result compiled with matmul_driver.cpp, and each run writes C back through files."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy
import pytest
import torch

from kernelkit.ops import matmul as mm

FIXTURES = Path(__file__).parent / "fixtures" / "cuda_cpu"
MATMUL_SOURCES = Path(mm.__file__).parent  # the .cu files and row4.cuh
CXX_FLAGS = ["-std=c++20", "-O1", "-pthread"]


CP_ASYNC_INCLUDE = '#include "cp_async.cuh"'
# cp_async.cuh's PTX helpers, swapped for block_emulator.h's functions (name -> CPU body; wait_copies keeps its
# template line, which stands before the __device__ that the swap starts at).
CPU_HELPERS = {
    "copy4_async": "inline void copy4_async(float* dst, const float* src, bool inside) "
                   "{ emu_copy(dst, src, inside ? 4 : 0, 4); }",
    "copy16_async": "inline void copy16_async(float* dst, const float* src, bool inside) "
                    "{ emu_copy(dst, src, inside ? 16 : 0, 16); }",
    "commit_copies": "inline void commit_copies() { emu_commit(); }",
    "wait_copies": "inline void wait_copies() { emu_wait(PENDING); }",
    "shared_address": "",
}


def _swap_function(source: str, name: str, replacement: str) -> str:
    """``source`` with the __device__ function ``name`` (its definition, up to the closing brace) replaced."""
    at = source.index(f" {name}(")  # ValueError if cp_async.cuh renamed a helper: update CPU_HELPERS
    start = source.rfind("__device__", 0, at)
    depth = 0
    for end in range(source.index("{", at), len(source)):
        depth += {"{": 1, "}": -1}.get(source[end], 0)
        if depth == 0:
            return source[:start] + replacement + source[end + 1:]
    raise ValueError(f"unbalanced braces after {name}")


def cpu_translation(source: str) -> str:
    """A kernel file with cp_async.cuh written in where it is included, and its inline PTX replaced by the
    emulator's calls."""
    assert CP_ASYNC_INCLUDE in source, "the kernel file no longer includes cp_async.cuh: update blockkit"
    source = source.replace(CP_ASYNC_INCLUDE, (MATMUL_SOURCES / "cp_async.cuh").read_text().replace("#pragma once", ""))
    for name, body in CPU_HELPERS.items():
        source = _swap_function(source, name, body)
    return source


def kernel_table(kernels: Sequence[str], tile_m: str, tile_n: str, threads: str) -> str:
    """The driver's KERNELS: each kernel with its block tile and threads (C expressions, the file's macros)."""
    rows = "".join(f'    {{"{k}", {k}, {tile_m}, {tile_n}, {threads}}},\n' for k in kernels)
    return f"\nstatic const KernelEntry KERNELS[] = {{\n{rows}}};\n"


def _cxx() -> str:
    return shutil.which("g++") or shutil.which("clang++") or "c++"


def skip_without_cxx20(folder: Path) -> None:
    """SKIPPED without a C++20 compiler that has <barrier> (g++ 11 or newer)."""
    probe = folder / "probe.cpp"
    probe.write_text("#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n")
    try:
        probed = subprocess.run([_cxx(), *CXX_FLAGS, str(probe), "-o", str(folder / "probe")], capture_output=True,
                                check=False).returncode == 0
    except OSError:
        probed = False
    if not probed:
        pytest.skip("needs a C++20 compiler with <barrier> (g++ 11 or newer)")


def build_driver(kernels: str, folder: Path, defines: Sequence[str] = ()) -> Path:
    """matmul_driver.cpp built in ``folder`` with ``kernels`` (translated source and its KERNELS) as kernels.h;
    ``defines`` are -D options for the kernel file's macros."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernels.h").write_text(kernels)
    binary = folder / "driver"
    built = subprocess.run([_cxx(), *CXX_FLAGS, *defines, f"-I{FIXTURES}", f"-I{folder}", f"-I{MATMUL_SOURCES}",
                            str(FIXTURES / "matmul_driver.cpp"), "-o", str(binary)],
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-4000:]
    return binary


PENDING_AT_EXIT = 3  # the driver's exit code when a thread left cp.async groups pending (C is written)


def run_on_cpu(driver: Path, kernel: str, a: torch.Tensor, b: torch.Tensor, *, deferred: bool = False,
               offset: int = 0, pending_allowed: bool = False) -> torch.Tensor:
    """C = A @ B by ``kernel`` on CPU threads; A (M, K), B (K, N) float32; ``offset`` floats off 16-byte alignment;
    ``deferred``: cp.async copies land as late as wait_group allows; ``pending_allowed``: C even when a thread
    left copies pending (a planted wrong wait does, and its C is what shows the bug)."""
    (m, k), n = a.shape, b.shape[1]
    folder = driver.parent
    a.numpy().tofile(folder / "a.bin")
    b.numpy().tofile(folder / "b.bin")
    done = subprocess.run([str(driver), kernel, str(int(deferred)), str(m), str(n), str(k), str(offset),
                           str(folder / "a.bin"), str(folder / "b.bin"), str(folder / "c.bin")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 or (pending_allowed and done.returncode == PENDING_AT_EXIT), done.stderr
    return torch.from_numpy(numpy.fromfile(folder / "c.bin", dtype="float32")).view(m, n)


def assert_matches_reference(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """Within matmul's fp32 tolerance of the float64 product (an unwritten output is NaN and fails)."""
    atol, rtol = mm.matmul.tolerance_for(torch.float32)
    torch.testing.assert_close(out.double(), a.double() @ b.double(), atol=atol, rtol=rtol)
