"""Launch rules of the streamed softmax (stream.cu): which rows it takes, how many CTAs share a row (the cluster
size, a build each), the threads per CTA and how many clusters the grid holds. Rows it does not take go to the
caller's fallback (``launch_stream`` returns False).

A row takes the streamed path on sm_90 or newer when x and y are 16-byte aligned, STREAM_MIN_N <= n_cols, and
some cluster size c of STREAM_CLUSTERS cuts it into c equal slices of whole 16-byte vectors of at most
SLICE_MAX_BYTES each (the smallest such c is taken: the fewer CTAs a row, the fewer partials and cluster barriers).
The grid holds as many clusters as can run at once (asked of the driver), each taking every G-th row.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import torch

from kernelkit.backends.cuda import CudaKernel, cuda_kernel
from kernelkit.ops.softmax.cluster import CLUSTER_MIN_N, has_clusters, sm_count

STREAM_CLUSTERS = (1, 2, 4, 8)
SLICE_MAX_BYTES = 64 * 1024  # a CTA's slice; two stages of it (128 KiB) fit an SM's 227 KiB of shared memory
STAGES = 2  # stream.cu's kStages
ITEMS = 8  # 16-byte vectors a thread holds (stream.cu's SOFTMAX_ITEMS)
STREAM_MAX_THREADS = 512  # stream.cu's kStreamThreads: 64 KiB = 512 threads x 8 vectors
STREAM_MIN_N = CLUSTER_MIN_N  # shorter rows: cuda_warp's register path
SMEM_PER_SM = 227 * 1024  # Hopper's shared memory an SM can give blocks (for the estimate without the driver)

CUDA_STREAM = {(dtype, size): cuda_kernel("stream.cu", f"softmax_stream_{suffix}_kernel",
                                          options=(f"-DSOFTMAX_STREAM_CLUSTER={size}",))
               for dtype, suffix in ((torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"))
               for size in STREAM_CLUSTERS}


def stream_shape(n_cols: int, element_size: int, slice_max: int = SLICE_MAX_BYTES,
                 items: int = ITEMS) -> tuple[int, int] | None:
    """(CTAs a row, threads a CTA) for rows of ``n_cols`` elements of ``element_size`` bytes in slices of at most
    ``slice_max`` bytes, ``items`` 16-byte vectors a thread, or None when the streamed kernel does not take that
    length. 65536 fp32 -> (4, 512); 65536 bf16 -> (2, 512)."""
    vec = 16 // element_size
    if n_cols < STREAM_MIN_N:
        return None
    for size in STREAM_CLUSTERS:
        if n_cols % (size * vec) == 0 and n_cols * element_size // size <= slice_max:
            vectors = n_cols // vec // size
            threads = 32 * -(-vectors // (32 * items))
            return (size, threads) if threads <= STREAM_MAX_THREADS else None
    return None


def estimated_clusters(cluster: int, shared_mem: int, sms: int) -> int:
    """Clusters that can run at once when the driver cannot say: CTAs an SM by shared memory, over all SMs, less
    a margin for SMs a GPC leaves out of whole clusters."""
    per_sm = max(1, SMEM_PER_SM // (shared_mem + 1024))
    return max(1, sms * per_sm // cluster * 7 // 8)


@cache
def grid_clusters(kernel: CudaKernel, cluster: int, threads: int, shared_mem: int, device_index: int) -> int:
    """Clusters of ``kernel`` (``shared_mem`` bytes of dynamic shared memory a CTA) that can run at once on
    cuda:``device_index``."""
    with torch.cuda.device(device_index):
        active = kernel.max_active_clusters(cluster, threads, shared_mem)
    return active if active else estimated_clusters(cluster, shared_mem, sm_count(device_index))


def cluster_device(device: torch.device) -> int | None:
    """The index of ``device`` when it is a GPU that runs thread-block clusters (sm_90 or newer), else None."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else 0
    return index if has_clusters(index) else None


def launch_stream(x: torch.Tensor, y: torch.Tensor, build: Callable[[torch.dtype, int], CudaKernel] | None = None,
                  slice_max: int = SLICE_MAX_BYTES, stages: int = STAGES, items: int = ITEMS) -> bool:
    """softmax of the contiguous, non-empty (M, N) x into y by stream.cu; False (nothing launched) when the row
    length, alignment, dtype or device rule it out. ``build`` (dtype, CTAs a row) -> a build of stream.cu with
    ``stages`` (SOFTMAX_STREAM_STAGES) and ``items`` (SOFTMAX_ITEMS), for slices of at most ``slice_max`` bytes:
    other shapes (scripts/gpu-softmax-tune); without it, CUDA_STREAM's."""
    n_rows, n_cols = x.shape
    shape = stream_shape(n_cols, x.element_size(), slice_max, items)
    if shape is None or (x.dtype, 1) not in CUDA_STREAM or (x.data_ptr() | y.data_ptr()) % 16:
        return False
    index = cluster_device(x.device)
    if index is None:
        return False
    cluster, threads = shape
    kernel = build(x.dtype, cluster) if build is not None else CUDA_STREAM[x.dtype, cluster]
    shared_mem = stages * n_cols * x.element_size() // cluster
    clusters = min(n_rows, grid_clusters(kernel, cluster, threads, shared_mem, index))
    kernel.launch(clusters * cluster, threads, x, y, n_rows, n_cols, shared_mem=shared_mem)
    return True
