"""The CUDA fp32 ladder's launch data: each rung's kernels (cuda.cu, cuda_pipelined.cu, cuda_tuned.cu), block shape
and tile, and one launcher; the tilings cuda_tuned.cu builds with.

Nothing is compiled here: ``cuda_kernel`` only reads the source; the first launch (or a compile-only check)
builds it with NVRTC.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from kernelkit.backends.cuda import CudaKernel, cuda_kernel

VECTOR_BYTES = 16  # a float4


@dataclass(frozen=True)
class Rung:
    """One rung: ``kernel`` for rows it can access 16 bytes at a time (or every row, when ``unaligned`` is None),
    ``unaligned`` for the others. A block of ``block`` threads computes a tile_m x tile_n tile of C."""

    name: str
    kernel: CudaKernel
    block: tuple[int, ...]
    tile_m: int
    tile_n: int
    unaligned: CudaKernel | None = None
    rows_on_x: bool = False  # blockIdx.x walks M (the naive kernel), else N

    @property
    def kernels(self) -> list[CudaKernel]:
        return [self.kernel] + ([self.unaligned] if self.unaligned is not None else [])

    def grid(self, m: int, n: int) -> tuple[int, int]:
        """Blocks along x and y: x carries up to 2**31 - 1 blocks, y only 65535."""
        tiles_m, tiles_n = -(-m // self.tile_m), -(-n // self.tile_n)
        return (tiles_m, tiles_n) if self.rows_on_x else (tiles_n, tiles_m)


def _kernel(name: str, source: str = "cuda.cu") -> CudaKernel:
    return cuda_kernel(source, f"matmul_{name}_kernel")


NAIVE = Rung("naive", _kernel("naive"), (32, 32), 32, 32, rows_on_x=True)
COALESCED = Rung("coalesced", _kernel("coalesced"), (32, 32), 32, 32)
SMEM = Rung("smem", _kernel("smem"), (32, 32), 32, 32)
TILE1D = Rung("tile1d", _kernel("tile1d"), (512,), 64, 64)
TILE2D = Rung("tile2d", _kernel("tile2d"), (256,), 128, 128)
VEC4 = Rung("vec4", _kernel("vec4"), (256,), 128, 128, unaligned=_kernel("vec4_unaligned"))
WARPTILE = Rung("warptile", _kernel("warptile"), (256,), 128, 128, unaligned=_kernel("warptile_unaligned"))
RUNGS = (NAIVE, COALESCED, SMEM, TILE1D, TILE2D, VEC4, WARPTILE)
# Past warptile (cuda_pipelined.cu): how the next data reaches the FMAs, the tiling unchanged.
DOUBLE_BUFFER = Rung("double_buffer", _kernel("double_buffer", "cuda_pipelined.cu"), (256,), 128, 128,
                     unaligned=_kernel("double_buffer_unaligned", "cuda_pipelined.cu"))
CP_ASYNC = Rung("cp_async", _kernel("cp_async", "cuda_pipelined.cu"), (256,), 128, 128,
                unaligned=_kernel("cp_async_unaligned", "cuda_pipelined.cu"))
PIPELINED = (DOUBLE_BUFFER, CP_ASYNC)


@dataclass(frozen=True)
class Tiling:
    """A build of cuda_tuned.cu, a field for each of its TUNED_* macros; the defaults are the file's own. Block
    tile bm x bn with bk of K a stage, warp tile wm x wn, lanes_n lanes across a warp's columns."""

    bm: int = 128
    bn: int = 128
    bk: int = 16
    wm: int = 64
    wn: int = 64
    lanes_n: int = 4
    stages: int = 2
    min_blocks: int = 2
    group_m: int = 8

    @property
    def threads(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn) * 32

    def options(self) -> tuple[str, ...]:
        """-D options for the fields that differ from the file's defaults."""
        default = Tiling()
        return tuple(f"-DTUNED_{f.name.upper()}={getattr(self, f.name)}" for f in fields(self)
                     if getattr(self, f.name) != getattr(default, f.name))

    def rung(self, name: str = "warp64") -> Rung:
        """The rung of this build: its aligned and scalar kernels, block and tile."""
        options = self.options()
        return Rung(name, cuda_kernel("cuda_tuned.cu", "matmul_warp64_kernel", options=options), (self.threads,),
                    self.bm, self.bn, unaligned=cuda_kernel("cuda_tuned.cu", "matmul_warp64_unaligned_kernel",
                                                            options=options))


# Past cp_async (cuda_tuned.cu): the tiling changes, set by the file's macros (scripts/gpu-matmul-tune builds others).
WARP64 = Tiling().rung()


def vector_aligned(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool:
    """Whether every row of A (M, K), B (K, N) and C (M, N) starts on a 16-byte boundary: K and N multiples of 4
    floats and the three base pointers aligned (a view into a larger buffer may not be)."""
    k, n = a.shape[1], b.shape[1]
    return k % 4 == 0 and n % 4 == 0 and all(t.data_ptr() % VECTOR_BYTES == 0 for t in (a, b, c))


def launch(rung: Rung, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B for fp32 A (M, K) and B (K, N) (copied to contiguous rows first if they are not) by ``rung``."""
    a, b = a.contiguous(), b.contiguous()
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=torch.float32, device=a.device)
    if c.numel() == 0:
        return c  # nothing to compute; a launch of no blocks is an error
    kernel = rung.kernel
    if rung.unaligned is not None and not vector_aligned(a, b, c):
        kernel = rung.unaligned
    kernel.launch(rung.grid(m, n), rung.block, a, b, c, m, n, k)
    return c
