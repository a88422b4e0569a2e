"""Launch rules of the thread-block-cluster softmax (cluster.cu): which rows it takes, how many CTAs a row gets,
and the threads per CTA. cluster.cu is built once a dtype and cluster size (2, 4 or 8 CTAs a row: the size is a
compile-time constant of ``__cluster_dims__``); each build is a declared kernel of the impl. Rows it does not take
go to the caller's fallback (``launch_cuda_cluster`` returns False).

A row takes the cluster path when the device is sm_90 or newer (clusters and distributed shared memory), x and y
are 16-byte aligned with n_cols a multiple of one 16-byte vector (the kernel moves only whole vectors), and
CLUSTER_MIN_N <= n_cols <= CLUSTER_MAX_N.
"""

from __future__ import annotations

from functools import cache

import torch

from kernelkit.backends.cuda import CudaKernel, cuda_kernel

# CTAs a row (the builds): a row takes the fewest whose threads hold its slices (<= 1024 a CTA) while the grid
# still gives every SM FILL CTAs (rows x CTAs >= FILL x SMs), else the most that hold it. Chosen from cold medians
# on an H200 (scripts/gpu-softmax-tune, 2026-11-27), % of a copy of the same bytes, CTAs a row 8 / 4 / 2:
#   fp32 1024x65536 82.5 / 84.0 / 86.1    fp32 4096x32768 85.3 / 89.3 / 92.9    fp32 64x262144 65.9 (8 only)
#   bf16 1024x65536 71.7 / 73.8 / 72.4    bf16 4096x32768 57.3 / 75.6 / 77.8    bf16 64x262144 57.8 / 47.4 / -
# and bf16 again once a slice kept its exponentials (one exp an element, cluster.cuh's Held; same day):
#   bf16 1024x65536 80.1 / 83.0 / 82.9    bf16 4096x32768 65.2 / 84.5 / 89.9
# The rule takes the best of each, or within 0.1 point of it. Fewer CTAs a row cost fewer cluster barriers and
# partials; a few rows need more CTAs to fill the GPU (64 rows: 8). FILL is not pinned by these
# shapes: at 132 SMs any value from 2 to 15 picks the same sizes for them.
CLUSTERS = (2, 4, 8)
FILL = 4
ITEMS = 8  # 16-byte vectors a thread holds (SOFTMAX_ITEMS): 32 values of fp32, 64 of fp16/bf16
CLUSTER_MAX_THREADS = 1024
# Rows up to 16384 fit one CTA of <= 512 threads: cuda_warp's register path already reads them once.
CLUSTER_MIN_N = 16385
CLUSTER_MAX_N = 8 * CLUSTER_MAX_THREADS * 32  # 262144: 8 CTAs x 1024 threads x 32 fp32 (4 x 1024 x 64 for 16-bit)

CUDA_CLUSTER = {(dtype, size): cuda_kernel("cluster.cu", f"softmax_cluster_{suffix}_kernel",
                                            options=(f"-DSOFTMAX_CLUSTER_32={size}", f"-DSOFTMAX_CLUSTER_16={size}"))
                for dtype, suffix in ((torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"))
                for size in CLUSTERS}


def cluster_threads(n_cols: int, element_size: int, cluster: int | None = None, items: int = ITEMS) -> int | None:
    """Threads per CTA (a multiple of 32) for rows of ``n_cols`` elements of ``element_size`` bytes, enough to
    hold a CTA's slice at ``items`` vectors each, in clusters of ``cluster`` CTAs (default: the largest build);
    None when the cluster kernel does not take that length (outside [CLUSTER_MIN_N, CLUSTER_MAX_N], more than 1024
    threads, or not whole 16-byte vectors). 65536 in clusters of 8 -> 256 threads (fp32), 128 (16-bit).
    """
    vec = 16 // element_size
    if not CLUSTER_MIN_N <= n_cols <= CLUSTER_MAX_N or n_cols % vec:
        return None
    per_cta = -(-(n_cols // vec) // (cluster or CLUSTERS[-1]))  # the kernel's slice, in vectors
    threads = 32 * -(-per_cta // (32 * items))
    return threads if threads <= CLUSTER_MAX_THREADS else None


def choose_cluster(n_rows: int, n_cols: int, element_size: int, sms: int) -> int | None:
    """CTAs a row (one of CLUSTERS) for an (n_rows, n_cols) softmax on a GPU of ``sms`` SMs: the fewest whose
    threads hold the slices while n_rows x CTAs >= FILL x sms, else the most that hold them; None when no build
    takes the row length."""
    holding = [size for size in CLUSTERS if cluster_threads(n_cols, element_size, size) is not None]
    return next((size for size in holding if n_rows * size >= FILL * sms), holding[-1] if holding else None)


@cache
def has_clusters(device_index: int) -> bool:
    """Whether cuda:``device_index`` runs thread-block clusters (compute capability 9.0 or newer)."""
    return torch.cuda.get_device_capability(device_index)[0] >= 9


@cache
def sm_count(device_index: int) -> int:
    """Streaming multiprocessors of cuda:``device_index``."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def launch_cuda_cluster(x: torch.Tensor, y: torch.Tensor, kernel: CudaKernel | None = None,
                        cluster: int | None = None, items: int = ITEMS) -> bool:
    """softmax of the contiguous, non-empty (M, N) x into y with one cluster per row; False (nothing launched)
    when the row length, alignment, dtype or device rule it out. ``kernel``, ``cluster`` and ``items``: a build
    of cluster.cu with other SOFTMAX_* values and what it was built with (scripts/gpu-softmax-tune); without
    them, the build of ``choose_cluster``'s size."""
    n_rows, n_cols = x.shape
    if (x.dtype, CLUSTERS[0]) not in CUDA_CLUSTER or (x.data_ptr() | y.data_ptr()) % 16:
        return False
    if not _device_has_clusters(x.device):
        return False
    if kernel is None:
        cluster = choose_cluster(n_rows, n_cols, x.element_size(), _sm_count(x.device))
        if cluster is None:
            return False
        kernel = CUDA_CLUSTER[x.dtype, cluster]
    threads = cluster_threads(n_cols, x.element_size(), cluster, items)
    if threads is None or cluster is None:
        return False
    kernel.launch(n_rows * cluster, threads, x, y, n_cols)
    return True


def _device_has_clusters(device: torch.device) -> bool:
    return device.type == "cuda" and has_clusters(device.index if device.index is not None else 0)


def _sm_count(device: torch.device) -> int:
    return sm_count(device.index if device.index is not None else 0)
