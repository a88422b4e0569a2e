"""Launch rules of the thread-block-cluster softmax (cluster.cu): which rows it takes and the threads per CTA for a
row length (a cluster is 8 CTAs for fp32 and 4 for fp16/bf16, whose CTAs hold twice the elements: one kernel a
dtype, each a full compile of cluster.cu). Rows it does not take go to the caller's fallback (``launch_cuda_cluster``
returns False).

A row takes the cluster path when the device is sm_90 or newer (clusters and distributed shared memory), x and y
are 16-byte aligned with n_cols a multiple of one 16-byte vector (the kernel moves only whole vectors), and
CLUSTER_MIN_N <= n_cols <= CLUSTER_MAX_N.
"""

from __future__ import annotations

from functools import cache

import torch

from kernelkit.backends.cuda import CudaKernel, cuda_kernel

# CTAs a row by element size (SOFTMAX_CLUSTER_32 / _16 in cluster.cu; 8 is the largest portable cluster). Cold
# medians on an H200 at 1024x65536, % of a copy of the same bytes (scripts/gpu-softmax-tune, 2026-11-27), CTAs a
# row 8 / 4 / 2: fp32 82.5 / 84.0 / 86.1%, bf16 71.7 / 73.8 / 72.4% (bf16 held as fp32 values, 8 CTAs: 57%). Fewer
# CTAs cannot hold the longest rows (262144 needs 8 at fp32, 4 at 16 bits, with 1024 threads), and a second build
# a dtype for the shorter ones would double the compile time for at most 4 points.
CLUSTER_SIZES = {4: 8, 2: 4}
ITEMS = 8  # 16-byte vectors a thread holds (SOFTMAX_ITEMS): 32 values of fp32, 64 of fp16/bf16
CLUSTER_MAX_THREADS = 1024
# Rows up to 16384 fit one CTA of <= 512 threads: cuda_warp's register path already reads them once.
CLUSTER_MIN_N = 16385
CLUSTER_MAX_N = 8 * CLUSTER_MAX_THREADS * 32  # 262144: 8 CTAs x 1024 threads x 32 fp32 (4 x 1024 x 64 for 16-bit)

CUDA_CLUSTER = {dtype: cuda_kernel("cluster.cu", f"softmax_cluster_{suffix}_kernel")
                for dtype, suffix in ((torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"))}


def cluster_threads(n_cols: int, element_size: int, cluster: int | None = None, items: int = ITEMS) -> int | None:
    """Threads per CTA (a multiple of 32) for rows of ``n_cols`` elements of ``element_size`` bytes, enough to
    hold a CTA's slice at ``items`` vectors each, in clusters of ``cluster`` CTAs (default CLUSTER_SIZES); None
    when the cluster kernel does not take that length (outside [CLUSTER_MIN_N, CLUSTER_MAX_N], more than 1024
    threads, or not whole 16-byte vectors). 65536 -> 256 threads at either size.
    """
    vec = 16 // element_size
    if not CLUSTER_MIN_N <= n_cols <= CLUSTER_MAX_N or n_cols % vec:
        return None
    per_cta = -(-(n_cols // vec) // (cluster or CLUSTER_SIZES[element_size]))  # the kernel's slice, in vectors
    threads = 32 * -(-per_cta // (32 * items))
    return threads if threads <= CLUSTER_MAX_THREADS else None


@cache
def has_clusters(device_index: int) -> bool:
    """Whether cuda:``device_index`` runs thread-block clusters (compute capability 9.0 or newer)."""
    return torch.cuda.get_device_capability(device_index)[0] >= 9


def launch_cuda_cluster(x: torch.Tensor, y: torch.Tensor, kernel: CudaKernel | None = None,
                        cluster: int | None = None, items: int = ITEMS) -> bool:
    """softmax of the contiguous, non-empty (M, N) x into y with one cluster per row; False (nothing launched)
    when the row length, alignment, dtype or device rule it out. ``kernel``, ``cluster`` and ``items``: a build
    of cluster.cu with other SOFTMAX_* values and what it was built with (scripts/gpu-softmax-tune)."""
    n_rows, n_cols = x.shape
    cluster = cluster or CLUSTER_SIZES.get(x.element_size(), 0)
    known = x.dtype in CUDA_CLUSTER
    threads = cluster_threads(n_cols, x.element_size(), cluster, items) if known else None
    if threads is None or (x.data_ptr() | y.data_ptr()) % 16 or not _device_has_clusters(x.device):
        return False
    (kernel or CUDA_CLUSTER[x.dtype]).launch(n_rows * cluster, threads, x, y, n_cols)
    return True


def _device_has_clusters(device: torch.device) -> bool:
    return device.type == "cuda" and has_clusters(device.index if device.index is not None else 0)
