"""``cuda_stream``: softmax rows streamed through shared memory by persistent clusters (stream.cu, sm_90). Its launch
rules and dispatch on CPU (recorded launches), its builds compiled here; against the reference on a GPU (gpu marker),
with rows fewer and far more than the clusters, -inf slices and the strict check.
"""

from __future__ import annotations

import pytest
import torch

import kernelkit as kk
from kernelkit.backends.sass import disassemble, find_tool
from kernelkit.ops import softmax as softmax_module
from kernelkit.ops.softmax import cluster, stream
from kernelkit.results import Status
from kernelkit.spec import seeded_normal
from opkit import assert_matches_reference, assert_statuses

FWD = softmax_module.softmax.impls
REFERENCE = softmax_module.softmax.reference


# ---- CPU: launch rules and dispatch -------------------------------------------------------------------------


@pytest.mark.parametrize(("n_cols", "element_size", "want"), [
    (65536, 4, (4, 512)), (65536, 2, (2, 512)),  # the long-row benchmark: 64 KiB slices
    (32768, 4, (2, 512)), (32768, 2, (1, 512)),  # a whole bf16 row in one CTA: no cluster barrier
    (131072, 4, (8, 512)), (262144, 2, (8, 512)),  # the longest rows it takes
    (20000, 4, (2, 320)),  # 80000 bytes: two slices of 2500 vectors, 320 threads of 8
    (262144, 4, None), (262152, 2, None),  # 1 MiB rows: 8 slices past 64 KiB (cuda_cluster takes 262144 fp32)
    (16384, 4, None), (40002, 4, None), (40004, 2, None),  # short; not whole vectors
    (16392, 4, (2, 288)),  # 4098 vectors: two slices of 2049, nine warps
    (16388, 4, None),  # 4097 vectors: past 64 KiB in one slice, and odd
])
def test_stream_shape(n_cols: int, element_size: int, want: tuple[int, int] | None) -> None:
    assert stream.stream_shape(n_cols, element_size) == want


@pytest.mark.parametrize("element_size", [4, 2])
def test_stream_shape_holds_every_slice(element_size: int) -> None:
    vec = 16 // element_size
    for n_cols in range(stream.STREAM_MIN_N - 1, 300_000, 8 * 41):
        shape = stream.stream_shape(n_cols, element_size)
        if shape is None:
            continue
        size, threads = shape
        vectors = n_cols // vec // size
        assert size in stream.STREAM_CLUSTERS and n_cols % (size * vec) == 0, n_cols  # whole, equal slices
        assert vectors * 16 <= stream.SLICE_MAX_BYTES, n_cols  # two stages fit shared memory
        assert threads % 32 == 0 and 32 <= threads <= stream.STREAM_MAX_THREADS, (n_cols, threads)
        assert threads * stream.ITEMS >= vectors > (threads - 32) * stream.ITEMS, (n_cols, threads)
        smaller = [s for s in stream.STREAM_CLUSTERS if s < size]  # none of these would have done
        assert all(n_cols % (s * vec) or n_cols * element_size // s > stream.SLICE_MAX_BYTES for s in smaller)


def test_estimated_clusters() -> None:
    # 128 KiB of stages: one CTA an SM; 132 SMs in clusters of 4 -> 33, less an eighth for GPC leftovers.
    assert stream.estimated_clusters(4, 128 * 1024, 132) == 28
    assert stream.estimated_clusters(1, 32 * 1024, 132) == 132 * 6 * 7 // 8  # six CTAs an SM by shared memory
    assert stream.estimated_clusters(8, 200 * 1024, 4) == 1  # never none


class _Recorder:
    """Stands in for a CudaKernel: records (name, grid, block, rows, n_cols, shared_mem) of each launch."""

    def __init__(self, name: str, launches: list[tuple]) -> None:
        self.name, self.launches = name, launches

    def launch(self, grid: int, block: int, x: torch.Tensor, y: torch.Tensor, *sizes: int, shared_mem: int = 0
               ) -> None:
        self.launches.append((self.name, grid, block, *sizes, shared_mem))


def test_cuda_stream_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    launches: list[tuple] = []
    monkeypatch.setattr(stream, "CUDA_STREAM", {(dtype, size): _Recorder(f"{k.name}/{size}", launches)
                                                for (dtype, size), k in stream.CUDA_STREAM.items()})
    monkeypatch.setattr(cluster, "CUDA_CLUSTER", {(dtype, size): _Recorder(f"{k.name}/{size}", launches)
                                                  for (dtype, size), k in cluster.CUDA_CLUSTER.items()})
    monkeypatch.setattr(softmax_module, "CUDA_WARP", {dtype: _Recorder(k.name, launches)
                                                      for dtype, k in softmax_module.CUDA_WARP.items()})
    monkeypatch.setattr(stream, "cluster_device", lambda device: 0)  # CPU tensors stand in for CUDA ones
    monkeypatch.setattr(stream, "grid_clusters", lambda kernel, size, threads, shared_mem, index: 128 // size)
    monkeypatch.setattr(cluster, "_device_has_clusters", lambda device: True)
    monkeypatch.setattr(cluster, "_sm_count", lambda device: 132)
    impl = FWD["cuda_stream"].fn
    impl(torch.zeros(1024, 65536))
    impl(torch.zeros(2, 5, 65536, dtype=torch.bfloat16))  # 3-D: 10 rows, fewer than the clusters
    impl(torch.zeros(300, 32768, dtype=torch.float16))  # one CTA a row
    impl(torch.zeros(2, 262144))  # 1 MiB rows: cuda_cluster's path
    impl(torch.zeros(1, 65537)[:, 1:])  # not 16-byte aligned: cuda_cluster's rules, then cuda_warp
    impl(torch.zeros(4, 16384))  # short: cuda_warp
    assert launches == [
        ("softmax_stream_f32_kernel/4", 32 * 4, 512, 1024, 65536, 2 * 65536),  # two stages of 64 KiB
        ("softmax_stream_bf16_kernel/2", 10 * 2, 512, 10, 65536, 2 * 65536),  # a cluster a row
        ("softmax_stream_f16_kernel/1", 128, 512, 300, 32768, 2 * 65536),
        ("softmax_cluster_f32_kernel/8", 2 * 8, 1024, 262144, 0),
        ("softmax_warp_f32_kernel", 1, 1024, 65536, 0),
        ("softmax_warp_f32_kernel", 4, 1024, 16384, 0),
    ]
    launches.clear()
    monkeypatch.setattr(stream, "cluster_device", lambda device: None)  # before sm_90
    monkeypatch.setattr(cluster, "_device_has_clusters", lambda device: False)
    impl(torch.zeros(3, 65536))
    assert launches == [("softmax_warp_f32_kernel", 3, 1024, 65536, 0)]


def test_stream_kernels_compile_for_sm90_without_spills(cpu_process: None, can_compile: bool) -> None:
    if not can_compile:
        pytest.skip("neither NVRTC (cuda.core) nor nvcc is here")
    kernels = [stream.CUDA_STREAM[torch.float32, size] for size in stream.STREAM_CLUSTERS]
    kernels.append(stream.CUDA_STREAM[torch.bfloat16, 2])
    assert set(stream.CUDA_STREAM.values()) <= set(FWD["cuda_stream"].kernels)
    for kernel in kernels:
        built = kernel.compile("sm_90")
        assert built.cubin[:4] == b"\x7fELF", built
        if find_tool("cuobjdump"):
            usage = disassemble(built.cubin).usage[kernel.name]  # the slice must stay in registers
            assert (usage.local, usage.stack) == (0, 0), (kernel.name, usage)


# ---- GPU ----------------------------------------------------------------------------------------------------

GPU_SHAPES = [
    (1024, 65536),  # the long-row benchmark: 4 CTAs a row in fp32, 2 at 16 bits
    (4096, 32768),  # many more rows than clusters: each cluster streams ~30 to ~60 rows
    (5, 131072),  # fewer rows than clusters: one row a cluster, 8 CTAs (fp32) or 4
    (333, 20000),  # a length no power of two: 320 threads, partial last items
]


def _has_clusters() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_streamed_rows_match_the_reference_on_gpu(shape: tuple[int, int], dtype: torch.dtype) -> None:
    x = seeded_normal(shape, dtype, "cuda", shape[1])
    assert_matches_reference(FWD["cuda_stream"].fn(x), REFERENCE, x)
    if _has_clusters():
        y = torch.full_like(x, float("nan"))
        assert stream.launch_stream(x, y)  # the streamed path itself, not a fallback
        assert_matches_reference(y, REFERENCE, x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_streamed_rows_with_minus_infinity_slices_on_gpu(dtype: torch.dtype) -> None:
    x = seeded_normal((300, 65536), dtype, "cuda", 7)
    x[0, :32768] = float("-inf")  # whole slices of -inf (16384 a CTA in fp32, 32768 at 16 bits)
    x[1, 1:] = float("-inf")  # one finite entry: 1 there, 0 elsewhere
    x[2, :] = float("-inf")  # nothing finite: NaN
    x[3] *= 1e4  # exp overflows unless each slice subtracts its max
    y = FWD["cuda_stream"].fn(x)
    assert (y[0, :32768] == 0).all()
    assert_matches_reference(y[0, 32768:], REFERENCE, x[0, 32768:])
    assert y[1, 0] == 1 and (y[1, 1:] == 0).all()
    assert y[2].isnan().all()
    assert_matches_reference(y[3:], REFERENCE, x[3:])  # rows after the NaN row are untouched by it


@pytest.mark.gpu
def test_streamed_rows_pass_the_strict_check_on_gpu() -> None:
    report = kk.check("softmax", device="cuda", impls=["cuda_stream"],
                      sizes=[(1024, 65536), (4096, 32768), (3, 40000), (7, 262144)],
                      dtypes=[torch.float32, torch.bfloat16])
    assert len(report.results) == 4 * 2
    assert_statuses(report, lambda r: Status.PASSED)
