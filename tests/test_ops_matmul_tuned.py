"""The fp32 ladder's tunable rung (cuda_warp64; kernels in cuda_tuned.cu, tiling set by its TUNED_* macros).

CPU: the kernels' own source on CPU threads (blockkit.py) at the default tiling and at a small one (64 threads,
3 stages, swizzle groups of 2 tile rows, so a few dozen rows already hold several groups and a partial one);
cp.async copies land at once or as late as wait_group allows. nvcc builds the defaults and every variant
scripts/gpu-matmul-tune times for sm_90: no spills, registers and shared memory within the launch bounds.
ladder.Tiling's defaults are the file's; the registry holds the impl. GPU: the edge and default sizes, misaligned
operands, and every tune variant at the edge shapes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import re
import runpy
import shutil
import subprocess
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
from kernelkit.backends.sass import parse_ptxas_log
from kernelkit.ops import matmul as mm
from kernelkit.ops.matmul import ladder
from opkit import misaligned, summary

CPU = torch.device("cpu")
SOURCE = Path(ladder.__file__).with_name("cuda_tuned.cu")
TUNE_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-matmul-tune"
ALIGNED_KERNEL, SCALAR_KERNEL = (k.name for k in ladder.WARP64.kernels)
# 2 warps of 32 x 16, a lane one 4 x 4 piece; BK 8 with 3 stages; groups of 2 tile rows.
SMALL = ladder.Tiling(bm=32, bn=32, bk=8, wm=32, wn=16, stages=3, group_m=2)


# ---- CPU: the kernels on CPU threads ------------------------------------------------------------------------

def translation() -> str:
    kernels = kernel_table([ALIGNED_KERNEL, SCALAR_KERNEL], "TUNED_BM", "TUNED_BN", "TUNED_THREADS")
    return cpu_translation(SOURCE.read_text()) + kernels


@pytest.fixture(scope="module")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The default and the SMALL build for the CPU with block_emulator.h (SKIPPED without a C++20 compiler)."""
    folder = tmp_path_factory.mktemp("cuda_cpu")
    skip_without_cxx20(folder)
    return {"default": build_driver(translation(), folder / "default"),
            "small": build_driver(translation(), folder / "small", SMALL.options())}


CASES = [  # (tiling, size, kernel): K and N multiples of 4 take the 16-byte kernel
    ("default", (128, 128, 16), ALIGNED_KERNEL),  # exactly one block and one K tile
    ("default", (130, 136, 40), ALIGNED_KERNEL),  # partial blocks in M and N; K = 2 tiles + 8
    ("default", (300, 260, 36), ALIGNED_KERNEL),  # 3 x 3 blocks: one partial swizzle group of 3 tile rows
    ("default", (3, 8, 0), ALIGNED_KERNEL),  # K = 0: no tiles, C is zeros
    ("default", (129, 257, 9), SCALAR_KERNEL),  # one past the block tile in M and N; K = 1 tile's 9 of 16
    ("default", (1, 300, 61), SCALAR_KERNEL),  # one row (127 of each block's masked); K = 3 tiles + 13
    ("small", (100, 68, 44), ALIGNED_KERNEL),  # 4 x 3 blocks: 2 whole groups of 2 tile rows; K = 5 tiles + 4
    ("small", (70, 97, 45), SCALAR_KERNEL),  # 3 tile rows: the last group has 1; partial tiles everywhere
    ("small", (33, 29, 17), SCALAR_KERNEL),
]


@pytest.mark.parametrize(("tiling", "size", "kernel"), CASES)
def test_kernels_on_cpu_threads(drivers: dict[str, Path], tiling: str, size: tuple[int, int, int],
                                kernel: str) -> None:
    a, b = mm.matmul_inputs(size, torch.float32, CPU, 0)
    for deferred in (False, True):
        assert_matches_reference(run_on_cpu(drivers[tiling], kernel, a, b, deferred=deferred), a, b)


def test_scalar_kernel_takes_misaligned_pointers_on_cpu_threads(drivers: dict[str, Path]) -> None:
    a, b = mm.matmul_inputs((129, 132, 132), torch.float32, CPU, 2)  # aligned sizes, pointers 4 bytes off
    assert_matches_reference(run_on_cpu(drivers["default"], SCALAR_KERNEL, a, b, offset=1), a, b)


def test_a_stage_read_before_its_wait_fails_on_cpu_threads(tmp_path: Path) -> None:
    """The harness catches a pipeline bug: waiting for one group fewer than the kernel needs reads stale tiles."""
    skip_without_cxx20(tmp_path)
    wrong = translation().replace("wait_copies<TUNED_STAGES - 2>", "wait_copies<TUNED_STAGES - 1>")
    assert wrong != translation()
    binary = build_driver(wrong, tmp_path)
    a, b = mm.matmul_inputs((130, 136, 40), torch.float32, CPU, 3)
    out = run_on_cpu(binary, ALIGNED_KERNEL, a, b, deferred=True, pending_allowed=True)
    with pytest.raises(AssertionError, match="not close"):  # wrong values, not the driver's exit code
        assert_matches_reference(out, a, b)


# ---- CPU: nvcc's sm_90 builds -------------------------------------------------------------------------------

def tune_variants() -> dict[str, ladder.Tiling]:
    """scripts/gpu-matmul-tune's variants (its module level imports only the standard library and tuning.py)."""
    script = runpy.run_path(str(TUNE_SCRIPT), run_name="gpu_matmul_tune")
    return {name: ladder.Tiling(**fields) for name, fields in script["VARIANTS"].items()}


def _ptxas(tiling: ladder.Tiling) -> str:
    done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "-Xptxas", "-v", *tiling.options(),
                           "-o", os.devnull, str(SOURCE)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (tiling, done.stderr[-3000:])
    return done.stdout + done.stderr


def test_every_tune_variant_builds_for_sm_90_without_spills() -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not here")
    variants = tune_variants()
    assert variants["warp64"] == ladder.Tiling()  # the first row of the table is the registered rung
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        logs = dict(zip(variants, pool.map(_ptxas, variants.values()), strict=True))
    for name, tiling in variants.items():
        found = parse_ptxas_log(logs[name])
        assert sorted(found) == sorted([ALIGNED_KERNEL, SCALAR_KERNEL]), logs[name]
        per_block = tiling.threads * tiling.min_blocks
        for kernel, used in found.items():
            assert (used.spill_stores, used.spill_loads, used.stack) == (0, 0, 0), (name, kernel, used)
            assert 0 < used.registers <= min(255, 65536 // per_block), (name, kernel, used)
        smem = [int(m) for m in re.findall(r"(\d+) bytes smem", logs[name])]
        stage_bytes = tiling.bk * (tiling.bm + 4 + tiling.bn) * 4  # A (padded rows) and B of one stage
        assert smem == [tiling.stages * stage_bytes] * 2, (name, smem)
        assert (smem[0] + 1024) * tiling.min_blocks <= 228 * 1024  # sm_90 reserves 1 KB a block


# ---- CPU: the tiling's Python side and the registry ---------------------------------------------------------

def test_tiling_defaults_are_the_files_macros() -> None:
    defaults = {m[1].lower(): int(m[2]) for m in re.finditer(r"#ifndef TUNED_(\w+)\n#define TUNED_\1 (\d+)",
                                                             SOURCE.read_text())}
    assert defaults == dataclasses.asdict(ladder.Tiling())
    assert ladder.Tiling().options() == () and ladder.Tiling().threads == 128
    assert SMALL.options() == ("-DTUNED_BM=32", "-DTUNED_BN=32", "-DTUNED_BK=8", "-DTUNED_WM=32", "-DTUNED_WN=16",
                               "-DTUNED_STAGES=3", "-DTUNED_GROUP_M=2") and SMALL.threads == 64
    rung = ladder.Tiling(bn=256, min_blocks=1).rung("wide")
    assert (rung.name, rung.block, rung.tile_m, rung.tile_n) == ("wide", (256,), 128, 256)
    assert all(k.options == ("-DTUNED_BN=256", "-DTUNED_MIN_BLOCKS=1") for k in rung.kernels)


def test_warp64_is_registered_with_both_kernels() -> None:
    impl = mm.matmul.impls["cuda_warp64"]
    assert tuple(impl.dtypes) == (torch.float32,) and list(impl.kernels) == ladder.WARP64.kernels
    assert [k.options for k in impl.kernels] == [(), ()]  # the file's defaults
    assert ladder.WARP64.grid(100, 300) == (3, 1) and ladder.WARP64.block == (128,)
    with pytest.raises(ValueError, match="float32"):
        impl.fn(torch.ones(3, 4, dtype=torch.float16), torch.ones(4, 6, dtype=torch.float16))


# ---- GPU ---------------------------------------------------------------------------------------------------

GPU_SIZES = [
    (4096, 4096, 4096),  # the square the ladder is timed at
    (1823, 1029, 781),  # a multiple of no tile; K odd: the scalar kernel
    (1, 1000, 4104),  # one row; aligned rows: the vector kernel with 127 rows of every block masked
    (128, 128, 16),  # exactly one block and one K tile
    (129, 257, 17),  # one past the block tile in M and N and past a K tile
    (2000, 130, 64),  # 16 tile rows, 2 columns: two whole swizzle groups
]


@pytest.mark.gpu
def test_warp64_passes_at_the_edge_and_default_sizes_on_gpu() -> None:
    sizes = list(dict.fromkeys(GPU_SIZES + mm.SIZES))
    report = kk.check("matmul", device="cuda", impls=["cuda_warp64"], dtypes=[torch.float32], sizes=sizes,
                      timeout=300)
    assert len(report.results) == len(sizes)
    bad = [row for row in summary(report) if row[4] != "PASSED"]
    assert not bad, bad


@pytest.mark.gpu
def test_warp64_takes_misaligned_operands_on_gpu() -> None:
    a = misaligned((129, 132), torch.float32, "cuda", 0)  # rows of 132 floats, the buffer 4 bytes off
    b = misaligned((132, 260), torch.float32, "cuda", 1)
    out = ladder.launch(ladder.WARP64, a, b)
    assert math.isclose(float((out.double() - a.double() @ b.double()).abs().max()), 0.0, abs_tol=1e-3)


@pytest.mark.gpu
def test_every_tune_variant_at_the_edge_shapes_on_gpu() -> None:
    atol, rtol = mm.matmul.tolerance_for(torch.float32)
    for name, tiling in tune_variants().items():
        rung = tiling.rung(name)
        for size in [(1000, 1030, 997), (1000, 1000, 1004), (300, 520, 40)]:  # scalar, float4, few tiles
            a, b = mm.matmul_inputs(size, torch.float32, torch.device("cuda"), 0)
            out = ladder.launch(rung, a, b).double()
            torch.testing.assert_close(out, a.double() @ b.double(), atol=atol, rtol=rtol, msg=f"{name} {size}")
