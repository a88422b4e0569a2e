"""The fp32 ladder's pipelined rungs (cuda_double_buffer, cuda_cp_async; kernels in cuda_pipelined.cu).

CPU: the kernels' own source runs on CPU threads (tests/fixtures/cuda_cpu: one std::thread per CUDA thread,
__syncthreads a std::barrier, cp.async emulated), so index math, edge masking, stage rotation and barrier
placement are checked without a GPU; cp.async copies land either at once or as late as wait_group allows.
The registry and the compile-only check see both impls. GPU: the default sizes and the edge shapes against the
reference, and misaligned operands on the scalar kernels.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import kernelkit as kk
from blockkit import (
    assert_matches_reference,
    build_driver,
    cpu_translation,
    kernel_table,
    run_on_cpu,
    skip_without_cxx20,
)
from kernelkit.ops import matmul as mm
from kernelkit.ops.matmul import ladder
from opkit import misaligned, summary

CPU = torch.device("cpu")
IMPLS = ["cuda_double_buffer", "cuda_cp_async"]
SOURCE = Path(ladder.__file__).with_name("cuda_pipelined.cu")
KERNELS = kernel_table([k.name for rung in ladder.PIPELINED for k in rung.kernels], "PL_BM", "PL_BN", "PL_THREADS")


# ---- CPU: the kernels on CPU threads ------------------------------------------------------------------------

def translation() -> str:
    return cpu_translation(SOURCE.read_text()) + KERNELS


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kernels built for the CPU with block_emulator.h (SKIPPED without a C++20 compiler)."""
    folder = tmp_path_factory.mktemp("cuda_cpu")
    skip_without_cxx20(folder)
    return build_driver(translation(), folder)


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
    wrong = translation().replace("wait_copies<PL_STAGES - 2>", "wait_copies<PL_STAGES - 1>")
    assert wrong != translation()
    binary = build_driver(wrong, tmp_path)
    a, b = mm.matmul_inputs((256, 128, 36), torch.float32, CPU, 3)
    out = run_on_cpu(binary, "matmul_cp_async_kernel", a, b, deferred=True, pending_allowed=True)
    with pytest.raises(AssertionError, match="not close"):  # wrong values, not the driver's exit code
        assert_matches_reference(out, a, b)


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
