"""Launch rules of the thread-block-cluster softmax (cluster.cu): which rows it takes and the threads per CTA for a
row length (the cluster is always 8 CTAs: one kernel a dtype, each a full compile of cluster.cu). Rows it does not
take go to the caller's fallback (``launch_cuda_cluster`` returns False).

A row takes the cluster path when the device is sm_90 or newer (clusters and distributed shared memory), x and y
are 16-byte aligned with n_cols a multiple of one 16-byte vector (the kernel moves only whole vectors), and
CLUSTER_MIN_N <= n_cols <= CLUSTER_MAX_N.
"""

from __future__ import annotations

from functools import cache

import torch

from kernelkit.backends.cuda import CudaKernel, cuda_kernel

CLUSTER_SIZE = 8  # CTAs a row (kClusterSize in cluster.cu): the largest portable cluster
CLUSTER_CACHE = 32  # values a thread holds in registers (kClusterCache in cluster.cu)
CLUSTER_MAX_THREADS = 1024
# Rows up to 16384 fit one CTA of <= 512 threads: cuda_warp's register path already reads them once.
CLUSTER_MIN_N = 16385
CLUSTER_MAX_N = CLUSTER_SIZE * CLUSTER_MAX_THREADS * CLUSTER_CACHE  # 262144: 8 CTAs x 1024 threads x 32 values

CUDA_CLUSTER = {dtype: cuda_kernel("cluster.cu", f"softmax_cluster_{suffix}_kernel")
                for dtype, suffix in ((torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"))}


def cluster_threads(n_cols: int, element_size: int) -> int | None:
    """Threads per CTA (a multiple of 32) for rows of ``n_cols`` elements of ``element_size`` bytes, enough to
    hold a CTA's slice at CLUSTER_CACHE values each; None when the cluster kernel does not take that length
    (outside [CLUSTER_MIN_N, CLUSTER_MAX_N], or not whole 16-byte vectors). 65536 -> 256 threads.
    """
    vec = 16 // element_size
    if not CLUSTER_MIN_N <= n_cols <= CLUSTER_MAX_N or n_cols % vec:
        return None
    slice_elements = -(-(n_cols // vec) // CLUSTER_SIZE) * vec  # the kernel's slice: whole vectors, rounded up
    return 32 * -(-slice_elements // (32 * CLUSTER_CACHE))


@cache
def has_clusters(device_index: int) -> bool:
    """Whether cuda:``device_index`` runs thread-block clusters (compute capability 9.0 or newer)."""
    return torch.cuda.get_device_capability(device_index)[0] >= 9


def launch_cuda_cluster(x: torch.Tensor, y: torch.Tensor) -> bool:
    """softmax of the contiguous, non-empty (M, N) x into y with one cluster per row; False (nothing launched)
    when the row length, alignment, dtype or device rule it out."""
    n_rows, n_cols = x.shape
    threads = cluster_threads(n_cols, x.element_size()) if x.dtype in CUDA_CLUSTER else None
    if threads is None or (x.data_ptr() | y.data_ptr()) % 16 or not _device_has_clusters(x.device):
        return False
    kernel: CudaKernel = CUDA_CLUSTER[x.dtype]
    kernel.launch(n_rows * CLUSTER_SIZE, threads, x, y, n_cols)
    return True


def _device_has_clusters(device: torch.device) -> bool:
    return device.type == "cuda" and has_clusters(device.index if device.index is not None else 0)
