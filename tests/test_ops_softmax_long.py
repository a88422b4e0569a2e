"""The long-row softmax impls: ``triton_split`` (a program per chunk of a row, two kernels) in the Triton
interpreter, and ``cuda_cluster`` (a thread-block cluster per row, sm_90) compiled here, its launch rules and its
dispatch checked with recorded launches; both against the reference on a GPU (gpu marker).
"""

from __future__ import annotations

import pytest
import torch

import kernelkit as kk
from kernelkit.backends.sass import disassemble, find_tool
from kernelkit.ops import softmax as softmax_module
from kernelkit.ops.softmax import cluster
from kernelkit.results import Status
from kernelkit.spec import seeded_normal
from opkit import KernelSpy, assert_matches_reference, assert_statuses

FWD = softmax_module.softmax.impls
REFERENCE = softmax_module.softmax.reference
SPLIT_KERNELS = ["softmax_split_partials_kernel", "softmax_split_normalize_kernel"]
# The interpreter computes bfloat16 wrongly (NaN; tests/opkit.py CPU_FP): float16 stands for the 16-bit path here.
CPU_DTYPES = (torch.float32, torch.float16)


def _split(x: torch.Tensor, chunk: int) -> torch.Tensor:
    y = torch.empty_like(x)
    softmax_module._launch_triton_split(x, y, chunk)
    return y


# ---- CPU: triton_split in the interpreter -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize(("shape", "chunk"), [
    ((3, 5000), 1024),  # five chunks a row, the last 904 wide: not a multiple of the chunk
    ((2, 1000), 256),  # four chunks, the last 232 wide
    ((4, 1), 1024),  # rows of one element: one chunk of one, every output 1.0
    ((5, 64), 64),  # one chunk exactly the row
])
def test_triton_split_matches_the_reference(shape: tuple[int, int], chunk: int, dtype: torch.dtype,
                                            cpu_process: None) -> None:
    x = seeded_normal(shape, dtype, "cpu", shape[1])
    y = _split(x, chunk)
    assert y.dtype == dtype and y.shape == x.shape
    assert_matches_reference(y, REFERENCE, x)
    if shape[1] == 1:
        assert torch.equal(y, torch.ones_like(x))


def test_triton_split_impl_launches_both_kernels(cpu_process: None, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = KernelSpy(softmax_module.triton_split_kernels)
    monkeypatch.setattr(softmax_module, "triton_split_kernels", spy)
    x = seeded_normal((2, 3, 4097), torch.float32, "cpu", 1)  # 3-D; two 4096 chunks, the second of one element
    y = FWD["triton_split"].fn(x)
    assert spy.used == SPLIT_KERNELS
    assert y.shape == x.shape
    assert_matches_reference(y, REFERENCE, x)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy, on the row of -inf: -inf - -inf
def test_triton_split_minus_infinity_chunks_and_huge_logits(cpu_process: None) -> None:
    x = seeded_normal((4, 1000), torch.float32, "cpu", 2)
    x[0, :512] = float("-inf")  # two whole chunks of -inf: their partials are (-inf, 0), the rest sums to 1
    x[1, 1:] = float("-inf")  # one finite entry, in the first chunk: exactly 1 there, 0 elsewhere
    x[2, :] = float("-inf")  # nothing finite: NaN, as torch.softmax gives
    x[3] *= 1e4  # exp overflows unless each chunk subtracts its max
    y = _split(x, 256)
    assert (y[0, :512] == 0).all() and abs(float(y[0].double().sum()) - 1) < 1e-5
    assert_matches_reference(y[0, 512:], REFERENCE, x[0, 512:])
    assert y[1, 0] == 1 and (y[1, 1:] == 0).all()
    assert y[2].isnan().all()
    assert y[3].isfinite().all()
    assert_matches_reference(y[3], REFERENCE, x[3])


def test_triton_split_takes_the_row_stride(cpu_process: None) -> None:
    wide = seeded_normal((3, 700), torch.float32, "cpu", 3)
    x = wide[:, :600]  # rows 700 apart in memory: the kernels index by stride, not by n_cols
    y = torch.empty_like(wide)[:, :600]
    softmax_module._launch_triton_split(x, y, 256)
    assert_matches_reference(y, REFERENCE, x)


# ---- CPU: cuda_cluster's launch rules and dispatch -----------------------------------------------------------


def test_cluster_threads_at_its_edges() -> None:
    threads = cluster.cluster_threads  # in clusters of 8 unless named
    assert threads(cluster.CLUSTER_MIN_N - 1, 4) is None  # short: one CTA holds the row (cuda_warp)
    assert threads(32768, 4) == threads(32768, 2, 4) == 128  # 4096 a CTA, 32 values a thread
    assert threads(65536, 4) == threads(65536, 2, 4) == 256
    assert threads(65536, 4, 2) == 1024 and threads(65536, 2, 2) == 512
    assert threads(40000, 4) == 160  # 1250 vectors a CTA, 8 each: 157 threads, rounded up to a warp
    assert threads(262144, 4) == threads(262144, 2, 4) == 1024  # the longest row: 8 CTAs x 1024 threads x 32
    assert threads(262144, 4, 4) is None and threads(131072, 4, 2) is None  # too long for fewer CTAs
    assert threads(262144 + 8, 2) is None  # past the cluster's registers
    assert threads(40002, 4) is None and threads(40004, 2) is None  # not whole 16-byte vectors


@pytest.mark.parametrize("element_size", [4, 2])
@pytest.mark.parametrize("size", cluster.CLUSTERS)
def test_cluster_threads_hold_every_slice(element_size: int, size: int) -> None:
    vec, items = 16 // element_size, cluster.ITEMS
    for n_cols in range(cluster.CLUSTER_MIN_N - vec, cluster.CLUSTER_MAX_N + 2 * vec, 8 * 37):
        n_cols -= n_cols % vec
        threads = cluster.cluster_threads(n_cols, element_size, size)
        per_cta = -(-(n_cols // vec) // size)  # vectors a CTA takes, as cluster.cu counts them
        if threads is None:
            in_range = cluster.CLUSTER_MIN_N <= n_cols <= cluster.CLUSTER_MAX_N
            assert not in_range or per_cta > 1024 * items, (n_cols, size)  # only a slice past 1024 threads
            continue
        assert threads % 32 == 0 and 32 <= threads <= 1024, (n_cols, threads)
        assert threads * items >= per_cta, (n_cols, threads)  # registers hold the slice
        assert (threads - 32) * items < per_cta, (n_cols, threads)  # no idle warp
        assert size * per_cta * vec >= n_cols, (n_cols, threads)  # the slices cover the row


@pytest.mark.parametrize(("rows", "n_cols", "element_size", "want"), [
    (1024, 65536, 4, 2), (4096, 32768, 4, 2), (64, 262144, 4, 8),  # the shapes gpu-softmax-tune measured
    (1024, 65536, 2, 2), (4096, 32768, 2, 2), (64, 262144, 2, 8),
    (1024, 131072, 4, 4),  # 2 CTAs would need 2048 threads
    (132, 65536, 4, 4), (66, 65536, 4, 8), (1, 32768, 2, 8),  # a few rows: more CTAs fill the GPU
    (1024, 16384, 4, None), (1024, 262152, 2, None),  # lengths no build takes
])
def test_choose_cluster_takes_the_fewest_ctas_that_fill_the_gpu(rows: int, n_cols: int, element_size: int,
                                                                want: int | None) -> None:
    assert cluster.choose_cluster(rows, n_cols, element_size, sms=132) == want


class _Recorder:
    """Stands in for a CudaKernel: records (name, grid, block, n_cols) of each launch."""

    def __init__(self, name: str, launches: list[tuple[str, int, int, int]]) -> None:
        self.name, self.launches = name, launches

    def launch(self, grid: int, block: int, x: torch.Tensor, y: torch.Tensor, n_cols: int) -> None:
        self.launches.append((self.name, grid, block, n_cols))


def test_cuda_cluster_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    launches: list[tuple[str, int, int, int]] = []
    monkeypatch.setattr(cluster, "CUDA_CLUSTER", {(dtype, size): _Recorder(f"{k.name}/{size}", launches)
                                                  for (dtype, size), k in cluster.CUDA_CLUSTER.items()})
    monkeypatch.setattr(softmax_module, "CUDA_WARP", {dtype: _Recorder(k.name, launches)
                                                      for dtype, k in softmax_module.CUDA_WARP.items()})
    monkeypatch.setattr(cluster, "_device_has_clusters", lambda device: True)
    monkeypatch.setattr(cluster, "_sm_count", lambda device: 132)
    impl = FWD["cuda_cluster"].fn
    impl(torch.zeros(3, 40000))
    impl(torch.zeros(2, 65536, dtype=torch.bfloat16))
    impl(torch.zeros(2, 5, 32768, dtype=torch.float16))  # 3-D: 10 rows
    impl(torch.zeros(600, 40000))  # enough rows to fill the GPU with 2 CTAs each
    impl(torch.zeros(1, 40001)[:, 1:])  # not 16-byte aligned: the fallback
    impl(torch.zeros(4, 16384))  # short: the fallback
    impl(torch.zeros(2, 40004, dtype=torch.bfloat16))  # not whole vectors: the fallback
    assert launches == [
        ("softmax_cluster_f32_kernel/8", 3 * 8, 160, 40000),
        ("softmax_cluster_bf16_kernel/8", 2 * 8, 128, 65536),  # 16-bit: twice the elements a thread
        ("softmax_cluster_f16_kernel/8", 10 * 8, 64, 32768),
        ("softmax_cluster_f32_kernel/2", 600 * 2, 640, 40000),
        ("softmax_warp_f32_kernel", 1, 1024, 40000),
        ("softmax_warp_f32_kernel", 4, 1024, 16384),
        ("softmax_warp_bf16_kernel", 2, 1024, 40004),
    ]
    launches.clear()
    monkeypatch.setattr(cluster, "_device_has_clusters", lambda device: False)  # before sm_90
    impl(torch.zeros(3, 40000))
    assert launches == [("softmax_warp_f32_kernel", 3, 1024, 40000)]


def test_cluster_kernels_compile_for_sm90_without_spills(cpu_process: None, can_compile: bool) -> None:
    if not can_compile:
        pytest.skip("neither NVRTC (cuda.core) nor nvcc is here")
    kernels = list(cluster.CUDA_CLUSTER.values())
    assert len(kernels) == 3 * len(cluster.CLUSTERS) and set(kernels) <= set(FWD["cuda_cluster"].kernels)
    for kernel in kernels:
        built = kernel.compile("sm_90")
        assert built.cubin[:4] == b"\x7fELF", built
        if find_tool("cuobjdump"):
            usage = disassemble(built.cubin).usage[kernel.name]  # the slice must stay in registers
            assert (usage.local, usage.stack) == (0, 0), (kernel.name, usage)
    # Before sm_90 they still build (every declared kernel is built for the device), as traps never launched.
    assert kernels[0].compile("sm_80").cubin[:4] == b"\x7fELF"
    # Without a GPU the case is SKIPPED, saying what compiled: one line a kernel, its builds counted.
    (result,) = kk.check("softmax", device="cpu", impls=["cuda_cluster"], sizes=[(2, 64)], dtypes=[torch.float32],
                         isolate=False).results
    assert result.status is Status.SKIPPED, result.message
    assert f"{len(cluster.CLUSTERS)} builds of softmax_cluster_f32_kernel for sm_" in result.message, result.message


# ---- GPU ----------------------------------------------------------------------------------------------------

GPU_SHAPES = [
    (1, 32768),  # one row: 8 CTAs x 128 threads (fp32; 64 at 16 bits)
    (1024, 65536),  # the long-row benchmark: 2 CTAs x 1024 threads (fp32; 512 at 16 bits)
    (600, 131072),  # 4 CTAs x 1024 threads in fp32 (2 CTAs x 1024 at 16 bits)
    (7, 262144),  # the longest row the cluster holds: 8 x 1024 threads x 32 (8 x 512 x 64)
    (3, 40000),  # a length no power of two: partial slices and threads
]


def _has_clusters() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_long_rows_match_the_reference_on_gpu(shape: tuple[int, int], dtype: torch.dtype) -> None:
    x = seeded_normal(shape, dtype, "cuda", shape[1])
    for name in ("cuda_cluster", "triton_split"):
        assert_matches_reference(FWD[name].fn(x), REFERENCE, x)
    if _has_clusters():
        y = torch.empty_like(x)
        assert cluster.launch_cuda_cluster(x, y)  # the cluster path itself, not the fallback
        assert_matches_reference(y, REFERENCE, x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_rows_with_minus_infinity_slices_on_gpu(dtype: torch.dtype) -> None:
    x = seeded_normal((4, 65536), dtype, "cuda", 5)
    x[0, :16384] = float("-inf")  # two whole CTA slices (8192 each) and four split chunks of -inf
    x[1, 1:] = float("-inf")  # one finite entry: 1 there, 0 elsewhere
    x[2, :] = float("-inf")  # nothing finite: NaN
    x[3] *= 1e4  # exp overflows unless each slice subtracts its max
    for name in ("cuda_cluster", "triton_split"):
        y = FWD[name].fn(x)
        assert (y[0, :16384] == 0).all(), name
        assert_matches_reference(y[0, 16384:], REFERENCE, x[0, 16384:])
        assert y[1, 0] == 1 and (y[1, 1:] == 0).all(), name
        assert y[2].isnan().all(), name
        assert_matches_reference(y[3], REFERENCE, x[3])


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1])  # 1: rows off a 16-byte boundary, so cuda_cluster falls back
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_around_the_cluster_limits_on_gpu(offset: int, dtype: torch.dtype) -> None:
    # 16384: the fallback's longest; 16385: longer, not whole vectors (the fallback); 16392: the cluster's first
    # whole-vector length in fp32 and bf16; 262144: its longest; 262152: one bf16 vector past it (the fallback).
    for n_cols in (16384, 16385, 16392, 262144, 262152):
        rows = 2
        x = seeded_normal((rows * n_cols + offset,), dtype, "cuda", n_cols)[offset:].view(rows, n_cols)
        for name in ("cuda_cluster", "triton_split"):
            assert_matches_reference(FWD[name].fn(x), REFERENCE, x)
        y = torch.empty_like(x)
        takes = _has_clusters() and not offset and cluster.cluster_threads(n_cols, x.element_size()) is not None
        assert cluster.launch_cuda_cluster(x, y) is takes, (n_cols, offset)


@pytest.mark.gpu
def test_long_rows_pass_the_strict_check_on_gpu() -> None:
    # The checker's whole path (strict by default: the declared kernels must launch, on one stream).
    report = kk.check("softmax", device="cuda", impls=["cuda_cluster", "triton_split"],
                      sizes=[(1024, 65536), (3, 40000), (7, 262144)], dtypes=[torch.float32, torch.bfloat16])
    assert len(report.results) == 2 * 3 * 2
    assert_statuses(report, lambda r: Status.PASSED)
