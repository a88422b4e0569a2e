"""The CUDA fp32 ladder's rungs past ``cuda_warptile``: ``cuda_double_buffer`` and ``cuda_cp_async``
(cuda_pipelined.cu), the same 128 x 128 x 8 tiling and warp layout with the next data brought to the FMAs earlier;
then ``cuda_warp64`` (cuda_tuned.cu), cp_async's pipeline with a larger tile a lane and a warp. Registered on
``matmul`` by the package."""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelkit.ops.matmul import ladder
from kernelkit.spec import Op

Launch = Callable[[ladder.Rung, torch.Tensor, torch.Tensor], torch.Tensor]  # checks the operands, then launches


def register(target: Op, launch: Launch) -> None:
    """``cuda_double_buffer``, ``cuda_cp_async`` and ``cuda_warp64`` on ``target`` (fp32 A (M, K) @ B (K, N) ->
    C (M, N))."""

    @target.impl("cuda_double_buffer", kernels=ladder.DOUBLE_BUFFER.kernels, dtypes=[torch.float32])
    def matmul_cuda_double_buffer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """CUDA, warptile with double-buffered register fragments as well as shared tiles.

        The shared loads of step k + 1 are issued before step k's 64 FMAs; at a tile's last step the next tile's
        stores, the barrier and its first fragment loads come before that step's FMAs, which then cover their
        latency (warptile leaves barrier and loads exposed at every tile boundary). 127 registers, 16.6 KB of
        shared memory, 2 blocks of 256 threads an SM. Unaligned rows: scalar global accesses.
        """
        return launch(ladder.DOUBLE_BUFFER, a, b)

    @target.impl("cuda_cp_async", kernels=ladder.CP_ASYNC.kernels, dtypes=[torch.float32])
    def matmul_cuda_cp_async(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """CUDA, double_buffer with cp.async copies (sm_80+) straight from global to shared memory, 3 stages.

        No registers hold the next tile and no thread stalls on a global load before storing it, so two tiles
        load while one is computed. B moves 16 bytes a copy, A 4 bytes (each float to its transposed place);
        copies past an edge fill zeros. 126 registers, 25 KB of shared memory, 2 blocks an SM. Unaligned rows:
        4-byte copies of B and scalar C stores.
        """
        return launch(ladder.CP_ASYNC, a, b)

    @target.impl("cuda_warp64", kernels=ladder.WARP64.kernels, dtypes=[torch.float32])
    def matmul_cuda_warp64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """CUDA, cp_async with 64 x 64 warp tiles: each lane 8 x 16 results, 4 warps a 128 x 128 block, BK = 16.

        A lane's k-step is 6 float4 shared loads for 128 FMAs (cp_async: 4 for 64), and a tile of 16 k-steps
        ends in one barrier of 4 warps; its copies (cp.async, 2 stages) land while the tile before is computed.
        Inner tiles are copied without edge masks; blocks take their tiles 8 tile rows at a time, column by
        column, for L2 reuse. 233 registers, 33 KB of shared memory, 2 blocks of 128 threads an SM. Unaligned
        rows: 4-byte copies of B and scalar C stores. Its tiling is cuda_tuned.cu's macros
        (scripts/gpu-matmul-tune times variants).

        Measured (H200, 4096^3, cold): 74.5% of cuBLAS fp32, under cuda_warptile's 77.5%; none of 8 other
        tilings passed 77.5% either. ncu: the FMA pipe 60% busy (warptile 62%), issue slots 66.5% (73.6%):
        at 4 warps a block, 12.5% occupancy, the long-scoreboard stalls (13% of warp cycles, against 0.1%) are
        the copies' waits, which 8 warps a block hide.
        """
        return launch(ladder.WARP64, a, b)
