"""The fp32 ladder's pipelined rungs (cuda_double_buffer, cuda_cp_async; kernels in cuda_pipelined.cu).

CPU: the kernels' own source runs on CPU threads (tests/fixtures/cuda_cpu: one std::thread per CUDA thread,
__syncthreads a std::barrier, cp.async emulated), so index math, edge masking, stage rotation and barrier
placement are checked without a GPU; cp.async copies land either at once or as late as wait_group allows.
The registry and the compile-only check see both impls. GPU: the default sizes and the edge shapes against the
reference, and misaligned operands on the scalar kernels.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy
import pytest
import torch

import kernelkit as kk
from kernelkit.ops import matmul as mm
from kernelkit.ops.matmul import ladder
from opkit import misaligned, summary

CPU = torch.device("cpu")
IMPLS = ["cuda_double_buffer", "cuda_cp_async"]
SOURCE = Path(ladder.__file__).with_name("cuda_pipelined.cu")
FIXTURES = Path(__file__).parent / "fixtures" / "cuda_cpu"
# The PTX of the cp.async helpers, swapped for block_emulator.h's functions (name -> CPU body).
CPU_HELPERS = {
    "copy4_async": "inline void copy4_async(float* dst, const float* src, bool inside) "
                   "{ emu_copy(dst, src, inside ? 4 : 0, 4); }",
    "copy16_async": "inline void copy16_async(float* dst, const float* src, bool inside) "
                    "{ emu_copy(dst, src, inside ? 16 : 0, 16); }",
    "commit_copies": "inline void commit_copies() { emu_commit(); }",
    "wait_oldest_tile": "inline void wait_oldest_tile() { emu_wait(PL_STAGES - 2); }",
    "shared_address": "",
}


# ---- CPU: the kernels on CPU threads ------------------------------------------------------------------------

def _swap_function(source: str, name: str, replacement: str) -> str:
    """``source`` with the __device__ function ``name`` (its definition, up to the closing brace) replaced."""
    at = source.index(f" {name}(")  # ValueError if the kernel file renamed a helper: update CPU_HELPERS
    start = source.rfind("__device__", 0, at)
    depth = 0
    for end in range(source.index("{", at), len(source)):
        depth += {"{": 1, "}": -1}.get(source[end], 0)
        if depth == 0:
            return source[:start] + replacement + source[end + 1:]
    raise ValueError(f"unbalanced braces after {name}")


def cpu_translation(source: str) -> str:
    """cuda_pipelined.cu with its inline PTX replaced by the emulator's calls."""
    for name, body in CPU_HELPERS.items():
        source = _swap_function(source, name, body)
    return source


CXX_FLAGS = ["-std=c++20", "-O1", "-pthread"]


def build_driver(kernels: str, folder: Path) -> Path:
    """matmul_driver.cpp built in ``folder`` with ``kernels`` (translated CUDA source) as its kernels.h."""
    (folder / "kernels.h").write_text(kernels)
    binary = folder / "driver"
    built = subprocess.run([_cxx(), *CXX_FLAGS, f"-I{FIXTURES}", f"-I{folder}", f"-I{SOURCE.parent}",  # row4.cuh
                            str(FIXTURES / "matmul_driver.cpp"),
                            "-o", str(binary)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-4000:]
    return binary


def _cxx() -> str:
    return shutil.which("g++") or shutil.which("clang++") or "c++"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kernels built for the CPU with block_emulator.h (SKIPPED without a C++20 compiler)."""
    folder = tmp_path_factory.mktemp("cuda_cpu")
    probe = folder / "probe.cpp"
    probe.write_text("#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n")
    try:
        probed = subprocess.run([_cxx(), *CXX_FLAGS, str(probe), "-o", str(folder / "probe")], capture_output=True,
                                check=False).returncode == 0
    except OSError:
        probed = False
    if not probed:
        pytest.skip("needs a C++20 compiler with <barrier> (g++ 11 or newer)")
    return build_driver(cpu_translation(SOURCE.read_text()), folder)


def run_on_cpu(driver: Path, kernel: str, a: torch.Tensor, b: torch.Tensor, *, deferred: bool = False,
               offset: int = 0) -> torch.Tensor:
    """C = A @ B by ``kernel`` on CPU threads; A (M, K), B (K, N) float32; ``offset`` floats off 16-byte alignment."""
    (m, k), n = a.shape, b.shape[1]
    folder = driver.parent
    a.numpy().tofile(folder / "a.bin")
    b.numpy().tofile(folder / "b.bin")
    done = subprocess.run([str(driver), kernel, str(int(deferred)), str(m), str(n), str(k), str(offset),
                           str(folder / "a.bin"), str(folder / "b.bin"), str(folder / "c.bin")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return torch.from_numpy(numpy.fromfile(folder / "c.bin", dtype="float32")).view(m, n)


def assert_matches_reference(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """Within matmul's fp32 tolerance of the float64 product (an unwritten output is NaN and fails)."""
    atol, rtol = mm.matmul.tolerance_for(torch.float32)
    torch.testing.assert_close(out.double(), a.double() @ b.double(), atol=atol, rtol=rtol)


ALIGNED = [  # K and N multiples of 4: the 16-byte kernels
    (128, 128, 8),  # exactly one block and one K tile
    (256, 132, 36),  # two block rows, a partial block column; K = 4 tiles + 4 (a partial last tile)
    (3, 8, 0),  # K = 0: no tiles, C is zeros
]
UNALIGNED = [  # K or N off 4: the scalar kernels
    (129, 257, 9),  # one past the block tile in M and N, one past a K tile
    (1, 1000, 261),  # one row (127 of each block's rows masked), 8 block columns, K = 32 tiles + 5
    (33, 29, 17),
]


@pytest.mark.parametrize("size", ALIGNED)
@pytest.mark.parametrize("kernel", ["double_buffer", "cp_async"])
def test_vector_kernels_on_cpu_threads(driver: Path, kernel: str, size: tuple[int, int, int]) -> None:
    a, b = mm.matmul_inputs(size, torch.float32, CPU, 0)
    for deferred in (False, True) if kernel == "cp_async" else (False,):
        assert_matches_reference(run_on_cpu(driver, f"matmul_{kernel}_kernel", a, b, deferred=deferred), a, b)


@pytest.mark.parametrize("size", UNALIGNED)
@pytest.mark.parametrize("kernel", ["double_buffer", "cp_async"])
def test_scalar_kernels_on_cpu_threads(driver: Path, kernel: str, size: tuple[int, int, int]) -> None:
    a, b = mm.matmul_inputs(size, torch.float32, CPU, 1)
    for deferred in (False, True) if kernel == "cp_async" else (False,):
        out = run_on_cpu(driver, f"matmul_{kernel}_unaligned_kernel", a, b, deferred=deferred)
        assert_matches_reference(out, a, b)


@pytest.mark.parametrize("kernel", ["double_buffer", "cp_async"])
def test_scalar_kernels_take_misaligned_pointers_on_cpu_threads(driver: Path, kernel: str) -> None:
    a, b = mm.matmul_inputs((129, 132, 132), torch.float32, CPU, 2)  # aligned sizes, pointers 4 bytes off
    assert_matches_reference(run_on_cpu(driver, f"matmul_{kernel}_unaligned_kernel", a, b, offset=1), a, b)


def test_a_stage_read_before_its_wait_fails_on_cpu_threads(driver: Path, tmp_path: Path) -> None:
    """The harness catches a pipeline bug: waiting for one group fewer than the kernel needs reads stale tiles."""
    wrong = cpu_translation(SOURCE.read_text()).replace("emu_wait(PL_STAGES - 2)", "emu_wait(PL_STAGES - 1)")
    binary = build_driver(wrong, tmp_path)
    a, b = mm.matmul_inputs((256, 128, 36), torch.float32, CPU, 3)
    with pytest.raises(AssertionError):
        assert_matches_reference(run_on_cpu(binary, "matmul_cp_async_kernel", a, b, deferred=True), a, b)


# ---- CPU: registration --------------------------------------------------------------------------------------

def test_pipelined_rungs_are_registered_with_both_kernels() -> None:
    assert [r.name for r in ladder.PIPELINED] == ["double_buffer", "cp_async"]
    for name, rung in zip(IMPLS, ladder.PIPELINED, strict=True):
        impl = mm.matmul.impls[name]
        assert tuple(impl.dtypes) == (torch.float32,) and list(impl.kernels) == rung.kernels
        assert rung.grid(100, 300) == (3, 1) and rung.block == (256,)
        with pytest.raises(ValueError, match="float32"):
            impl.fn(torch.ones(3, 4, dtype=torch.float16), torch.ones(4, 6, dtype=torch.float16))


# ---- GPU ---------------------------------------------------------------------------------------------------

GPU_SIZES = [
    (4096, 4096, 4096),  # the square the ladder is timed at
    (1823, 1029, 781),  # a multiple of no tile; K odd: the scalar kernels
    (1, 1000, 4104),  # one row; aligned rows: the vector kernels with 127 rows of every block masked
    (128, 128, 8),  # exactly one block and one K tile
    (129, 257, 9),  # one past the block tile in M and N and past a K tile
]


@pytest.mark.gpu
def test_pipelined_rungs_pass_at_the_edge_and_default_sizes_on_gpu() -> None:
    sizes = list(dict.fromkeys(GPU_SIZES + mm.SIZES))
    report = kk.check("matmul", device="cuda", impls=IMPLS, dtypes=[torch.float32], sizes=sizes, timeout=300)
    assert len(report.results) == len(IMPLS) * len(sizes)
    bad = [row for row in summary(report) if row[4] != "PASSED"]
    assert not bad, bad


@pytest.mark.gpu
def test_pipelined_rungs_take_misaligned_operands_on_gpu() -> None:
    a = misaligned((129, 132), torch.float32, "cuda", 0)  # rows of 132 floats, the buffer 4 bytes off
    b = misaligned((132, 260), torch.float32, "cuda", 1)
    expected = a.double() @ b.double()
    for rung in ladder.PIPELINED:
        out = ladder.launch(rung, a, b)
        assert math.isclose(float((out.double() - expected).abs().max()), 0.0, abs_tol=1e-3), rung.name
