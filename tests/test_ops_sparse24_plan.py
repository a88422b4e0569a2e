"""linear24 on cuSPARSELt called directly (cusparselt_plan.py, cusparselt_lib.py): set-up made once, one matmul a call.

CPU: the transcribed struct sizes and enums against header text (and the real header where the library is
installed), blob alignment, the caches (compressed weight per tensor and version, plans per shape), the reasons
the impls are SKIPPED without a GPU or without the library, nothing done at import. GPU: the compression equals
torch._cslt_compress byte for byte; every variant against the float64 reference at the target shapes and edges,
fp16 and bf16, within twice dense F.linear's own error; an in-place write to w is seen; the plan is reused and
a call's host time is a fraction of torch's; a side stream and CUDA-graph capture.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kernelkit as kk
from kernelkit.errors import BackendUnavailable
from kernelkit.ops import sparse24 as sp
from kernelkit.ops.sparse24 import cusparselt, cusparselt_lib, cusparselt_plan, layout
from kernelkit.results import Status

PLANNED = {"cusparselt_planned": {}, "cusparselt_planned_search": {"search": True},
           "cusparselt_planned_fused_t": {"fuse_transpose": True}}

# cusparseLt.h 0.8.1 as it writes these declarations (the parts header_problems reads).
HEADER_TEXT = """
typedef struct { alignas(16) uint8_t data[512]; } cusparseLtHandle_t;
typedef struct { alignas(16) uint8_t data[512]; } cusparseLtMatDescriptor_t;
typedef struct { alignas(16) uint8_t data[512]; } cusparseLtMatmulDescriptor_t;
typedef struct { alignas(16) uint8_t data[512]; } cusparseLtMatmulAlgSelection_t;
typedef struct { alignas(16) uint8_t data[512]; } cusparseLtMatmulPlan_t;
typedef enum {
    CUSPARSELT_SPARSITY_50_PERCENT
} cusparseLtSparsity_t;
typedef enum {
    CUSPARSE_COMPUTE_32I,
    CUSPARSE_COMPUTE_16F,
    CUSPARSE_COMPUTE_32F
} cusparseComputeType;
typedef enum {
    CUSPARSELT_MATMUL_ALG_DEFAULT
} cusparseLtMatmulAlg_t;
typedef enum {
    CUSPARSELT_MATMUL_ALG_CONFIG_ID,     // READ/WRITE
    CUSPARSELT_MATMUL_ALG_CONFIG_MAX_ID, // READ-ONLY
    CUSPARSELT_MATMUL_SEARCH_ITERATIONS  // READ/WRITE
} cusparseLtMatmulAlgAttribute_t;
"""


@pytest.fixture
def fresh_library():
    """library() forgets what it loaded or refused, before and after the test."""
    cusparselt_lib.library.cache_clear()
    yield
    cusparselt_lib.library.cache_clear()


def _installed_library() -> Path | None:
    return next((p for p in cusparselt_lib.candidate_paths() if p.is_file()), None)


# ---- CPU: the transcription ---------------------------------------------------------------------------------------


def test_header_text_agrees_and_changes_are_named() -> None:
    assert cusparselt_lib.header_problems(HEADER_TEXT) == []
    grown = HEADER_TEXT.replace("data[512]; } cusparseLtMatmulPlan_t", "data[1024]; } cusparseLtMatmulPlan_t")
    assert cusparselt_lib.header_problems(grown) == ["cusparseLtMatmulPlan_t: 1024 bytes, not 512"]
    reordered = HEADER_TEXT.replace("CUSPARSE_COMPUTE_32I,\n", "")
    reordered = reordered.replace("CUSPARSE_COMPUTE_16F,", "CUSPARSE_COMPUTE_16F = 4,")
    assert cusparselt_lib.header_problems(reordered) == ["CUSPARSE_COMPUTE_32F = 5, not 2"]
    assert "cusparseLtHandle_t: not found" in cusparselt_lib.header_problems(HEADER_TEXT.replace("Handle", "H"))


def test_blobs_hold_the_largest_struct_at_a_16_byte_boundary() -> None:
    assert max(cusparselt_lib.STRUCT_BYTES.values()) <= cusparselt_lib.BLOB_BYTES
    blobs = [cusparselt_lib.Blob() for _ in range(32)]
    assert all(b.ptr % 16 == 0 for b in blobs)
    assert ctypes.string_at(blobs[0].ptr, cusparselt_lib.BLOB_BYTES) == bytes(cusparselt_lib.BLOB_BYTES)


def test_installed_library_and_header_agree_with_the_transcription(fresh_library) -> None:
    path = _installed_library()
    if path is None:
        pytest.skip("libcusparseLt.so.0 is not installed here (set KERNELKIT_CUSPARSELT to test one)")
    loaded = cusparselt_lib.library()
    assert loaded.version[:2] >= cusparselt_lib.HEADER_VERSION[:2] and loaded.error_string(3)
    header = path.parent.parent / "include" / "cusparseLt.h"
    if header.is_file():
        assert cusparselt_lib.header_problems(header.read_text()) == []


# ---- CPU: the caches ----------------------------------------------------------------------------------------------


def test_compressed_weight_is_made_again_after_an_in_place_write() -> None:
    cache = cusparselt.WeightCache()
    made: list[torch.Tensor] = []

    def fake_compress(w: torch.Tensor) -> torch.Tensor:
        made.append(w.clone())
        return w[:, ::2].clone()

    w = sp.sparsify24(sp.nonzero_normal((16, 32), torch.float16, "cpu", 0))
    first = cusparselt_plan.compressed(w, cache, fake_compress)
    assert cusparselt_plan.compressed(w, cache, fake_compress) is first and len(made) == 1
    w.mul_(-1)  # still 2:4; the version counter moved
    again = cusparselt_plan.compressed(w, cache, fake_compress)
    assert len(made) == 2 and torch.equal(again, -first) and torch.equal(made[1], w)
    cusparselt_plan.compressed(w.clone(), cache, fake_compress)  # the same values in another tensor: made for it
    assert len(made) == 3 and cache.misses == 3 and cache.hits == 1


def test_plans_are_kept_per_shape_most_recent_first() -> None:
    plans = cusparselt_plan.PlanCache(max_plans=2)
    made: list[cusparselt_plan.PlanKey] = []

    def make(key: cusparselt_plan.PlanKey) -> object:
        made.append(key)
        return object()

    keys = [cusparselt_plan.PlanKey(0, torch.float16, 32, 64, rows, False, False) for rows in (8, 16, 24)]
    a = plans.get(keys[0], make)
    assert plans.get(keys[0], make) is a and plans.get(keys[0]._replace(fuse_transpose=True), make) is not a
    plans.get(keys[1], make)  # keys[0] was used before the fused one: it is the one dropped
    assert len(plans) == 2 and plans.get(keys[0], make) is not a and len(made) == 4
    plans.get(keys[2], make)
    assert plans.hits == 1 and plans.misses == 5 and len(plans) == 2


# ---- CPU: the layout, through a stand-in library -----------------------------------------------------------------


class FakeCusparseLt:
    """Does on the CPU what cuSPARSELt's documentation says a call does, from the descriptors it was given: the
    matmul reads A (here w stored dense, not compressed), B and writes D where their (rows, cols, ld, order) say."""

    def __init__(self) -> None:
        self.descriptors: dict[int, tuple[int, int, int, int]] = {}
        self.matmuls: dict[int, tuple[int, int, int, int, int]] = {}
        self.plans: dict[int, int] = {}
        self.calls: list[str] = []
        self.functions = {"cusparseLtMatmul": lambda *args: self.call("cusparseLtMatmul", *args) or 0}

    def error_string(self, status: int) -> str:
        return "fake"

    def call(self, name: str, *args) -> None:
        self.calls.append(name)
        if name in ("cusparseLtDenseDescriptorInit", "cusparseLtStructuredDescriptorInit"):
            _, blob, rows, cols, ld, _, _, order = args[:8]
            self.descriptors[blob] = (rows, cols, ld, order)
        elif name == "cusparseLtMatmulDescriptorInit":
            _, blob, op_a, op_b, a, b, _, d, _ = args
            self.matmuls[blob] = (op_a, op_b, a, b, d)
        elif name == "cusparseLtMatmulPlanInit":
            self.plans[args[1]] = args[2]
        elif name == "cusparseLtMatmulGetWorkspace":
            args[2]._obj.value = 256
        elif name == "cusparseLtSpMMACompressedSize2":
            rows, cols, _, _ = self.descriptors[args[1]]
            args[2]._obj.value = layout.compressed_bytes(rows, cols)  # sm_90's size
        elif name == "cusparseLtSpMMACompress2":  # "compresses" by copying w as it is (the matmul reads it so)
            rows, cols, ld, _ = self.descriptors[args[1]]
            self.compressed_with = (self.descriptors[args[1]], args[2], args[3])
            ctypes.memmove(args[5], args[4], min(rows * ld * 2, layout.compressed_bytes(rows, ld)))
        elif name in ("cusparseLtMatmul", "cusparseLtMatmulSearch"):
            op_a, op_b, a, b, d = self.matmuls[self.plans[args[1]]]
            mat_a, mat_b = self._read(args[3], a), self._read(args[4], b)
            mat_a, mat_b = (mat_a.t() if op_a else mat_a), (mat_b.t() if op_b else mat_b)
            self._write(args[7], d, args[2]._obj.value * mat_a @ mat_b)

    def _view(self, ptr: int, desc: int) -> tuple[torch.Tensor, bytearray]:
        rows, cols, ld, order = self.descriptors[desc]
        major, minor = (rows, cols) if order == cusparselt_lib.CUSPARSE_ORDER_ROW else (cols, rows)
        raw = bytearray(ctypes.string_at(ptr, (major - 1) * ld * 2 + minor * 2))
        flat = torch.frombuffer(raw + bytearray(ld * 2 - minor * 2), dtype=torch.float16)
        mat = flat.view(major, ld)[:, :minor]
        return (mat if order == cusparselt_lib.CUSPARSE_ORDER_ROW else mat.t()), raw

    def _read(self, ptr: int, desc: int) -> torch.Tensor:
        return self._view(ptr, desc)[0].float()

    def _write(self, ptr: int, desc: int, value: torch.Tensor) -> None:
        mat, raw = self._view(ptr, desc)
        mat.copy_(value)
        flat = mat.untyped_storage()
        ctypes.memmove(ptr, flat.data_ptr(), len(raw))


@pytest.fixture
def fake_library(monkeypatch: pytest.MonkeyPatch) -> FakeCusparseLt:
    fake = FakeCusparseLt()
    monkeypatch.setattr(cusparselt_lib, "library", lambda: fake)
    monkeypatch.setattr(cusparselt_plan, "handle", lambda device: cusparselt_lib.Blob())
    monkeypatch.setattr(cusparselt_plan, "unavailable", lambda x, w: None)  # CPU tensors stand for CUDA ones
    monkeypatch.setattr(cusparselt_plan, "PLANS", cusparselt_plan.PlanCache())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: type("S", (), {"cuda_stream": 7})())
    return fake


@pytest.mark.parametrize("rows", [1, 8, 37])
@pytest.mark.parametrize("variant", list(PLANNED))
def test_descriptors_give_y_in_every_variant(fake_library: FakeCusparseLt, rows: int, variant: str,
                                             cpu_process: None) -> None:  # the transpose in Triton's interpreter
    x, w = sp.linear_inputs((rows, 32, 64), torch.float16, torch.device("cpu"), rows)
    expected = F.linear(x.float(), w.float()).half()
    for dense in (x, x.t().contiguous().t()):  # and a column-major x
        y = cusparselt_plan.linear_compressed(dense, w.view(torch.uint8).flatten(), 32, **PLANNED[variant])
        assert y.shape == (rows, 32) and y.is_contiguous() and torch.equal(y, expected)
    assert cusparselt_plan.PLANS.misses == 1 and fake_library.calls.count("cusparseLtMatmulPlanInit") == 1
    assert fake_library.calls.count("cusparseLtMatmulSearch") == int(variant.endswith("search"))
    for fresh in (False, True):  # a cached plan, and a new one (whose search would read the short buffer)
        if fresh:
            cusparselt_plan.PLANS.clear()
        with pytest.raises(ValueError, match="compressed weight has"):
            cusparselt_plan.linear_compressed(x, w.view(torch.uint8).flatten()[:100], 32, **PLANNED[variant])
        assert fake_library.calls.count("cusparseLtMatmulSearch") == int(variant.endswith("search"))


@pytest.mark.parametrize(("n_src", "width", "n_rows"), [
    (70, 136, 129),  # partial tiles both ways; the padded rows of x (130..135) left out
    (1, 8, 1), (64, 64, 64), (130, 8, 3),  # one element; one whole tile; a tall D of few rows
])
def test_transposed_rows_is_the_transpose(n_src: int, width: int, n_rows: int, cpu_process: None) -> None:
    from kernelkit.ops.sparse24 import transpose

    src = torch.arange(n_src * width, dtype=torch.float32).view(n_src, width).half()
    y = transpose.transposed_rows(src, n_rows)
    assert y.is_contiguous() and torch.equal(y, src.t()[:n_rows])
    assert transpose.transposed_rows(src, 0).shape == (0, n_src)
    strided = torch.zeros(n_src, 2 * width, dtype=torch.float16)[:, ::2]  # not unit-stride: torch's copy
    assert torch.equal(transpose.transposed_rows(strided, n_rows), strided.t()[:n_rows])


def test_compress_describes_w_as_torch_does(fake_library: FakeCusparseLt) -> None:
    w = sp.sparsify24(sp.nonzero_normal((32, 64), torch.float16, "cpu", 5))
    packed = cusparselt_plan.compress(w.t().contiguous().t())  # a column-major w is made row-major first
    assert packed.dtype == w.dtype and packed.shape == cusparselt.compressed_shape(w) == (32, 40)  # torch's tensor
    assert torch.equal(packed.view(torch.uint8).flatten(), w.view(torch.uint8).flatten()[: 32 * 40 * 2])
    row, sparse_a, no_transpose = cusparselt_lib.CUSPARSE_ORDER_ROW, 1, cusparselt_lib.CUSPARSE_OPERATION_NON_TRANSPOSE
    assert fake_library.compressed_with == ((32, 64, 64, row), sparse_a, no_transpose)
    assert fake_library.calls[-1] == "cusparseLtMatDescriptorDestroy"


# ---- CPU: why the impls skip --------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU reason")
def test_every_planned_impl_skips_without_a_gpu(cpu_process: None) -> None:
    report = kk.check("linear24", impls=list(PLANNED), device="cpu", isolate=False, dtypes=[torch.float16])
    assert len(report.results) == len(PLANNED) * len(sp.linear24.cpu_sizes)
    assert all(r.status is Status.SKIPPED and "no GPU here" in r.message for r in report.results), report.results
    x, w = sp.linear_inputs((8, 32, 64), torch.float16, torch.device("cpu"), 0)
    with pytest.raises(BackendUnavailable, match="CUDA tensors only"):
        cusparselt_plan.linear(x, w)


def test_a_missing_library_is_a_reason_naming_where_it_looked(fresh_library, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    nowhere = tmp_path / "nvidia" / "cusparselt" / "lib" / "libcusparseLt.so.0"
    monkeypatch.setattr(cusparselt_lib, "candidate_paths", lambda: [nowhere])
    monkeypatch.setattr(cusparselt_lib, "SONAME", "libcusparseLt_absent.so.0")
    monkeypatch.setattr(cusparselt_lib.ctypes.util, "find_library", lambda name: None)
    with pytest.raises(BackendUnavailable, match="was not found") as caught:
        cusparselt_lib.library()
    assert str(nowhere.parent) in str(caught.value) and "KERNELKIT_CUSPARSELT" in str(caught.value)


def test_an_older_release_or_a_changed_header_is_refused(tmp_path: Path) -> None:
    class Loaded:
        path, version = "libcusparseLt.so.0", (0, 6, 3)

    with pytest.raises(BackendUnavailable, match="is cuSPARSELt 0.6.3"):
        cusparselt_lib._checked(Loaded(), None)
    Loaded.version = (0, 8, 0)
    header = tmp_path / "cusparseLt.h"
    header.write_text(HEADER_TEXT.replace("data[512]; } cusparseLtHandle_t", "data[2048]; } cusparseLtHandle_t"))
    with pytest.raises(BackendUnavailable, match="cusparseLtHandle_t: 2048 bytes"):
        cusparselt_lib._checked(Loaded(), header)
    header.write_text(HEADER_TEXT)
    assert cusparselt_lib._checked(Loaded(), header) is not None
    header.write_text(HEADER_TEXT.replace("cusparseLtSparsity_t", "Sparsity").replace("CUSPARSE_COMPUTE_16F,",
                                                                                      "CUSPARSE_COMPUTE_16F = X,"))
    assert cusparselt_lib.header_problems(header.read_text()) == ["cusparseLtSparsity_t: not found",
                                                                   "cusparseComputeType: unreadable"]
    assert cusparselt_lib._checked(Loaded(), header) is not None  # what the parser cannot read is let pass


def test_importing_loads_nothing() -> None:
    code = ("import kernelkit.ops.sparse24 as sp; from pathlib import Path; import torch; "
            "from kernelkit.ops.sparse24 import cusparselt_lib as lib, cusparselt_plan as plan; "
            "assert 'libcusparseLt' not in Path('/proc/self/maps').read_text(); "
            "assert lib.library.cache_info().currsize == 0 and len(plan.PLANS) == 0; "
            "assert not torch.cuda.is_initialized()")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ---- GPU ----------------------------------------------------------------------------------------------------------

SHAPES = [
    (4096, 11008, 4096), (4096, 4096, 11008), (1024, 16384, 16384),  # the target's shapes
    (1, 64, 128),  # one row: padded to 8 inside
    (8, 32, 64),  # the smallest tiles: 8 dense rows, 16 x 32 sparse
    (37, 48, 80),  # rows off the tile, N and K not powers of two
]


def _error_bound(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(float64 reference, bound): the kernel may err by at most twice dense F.linear's own error against the
    reference, or one unit in the last place of the output's largest magnitude where dense happens to be exact."""
    expected = F.linear(x.double(), w.double())
    dense_err = (F.linear(x, w).double() - expected).abs().max().item()
    return expected, max(2 * dense_err, torch.finfo(x.dtype).eps * expected.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_compression_is_torchs_byte_for_byte(dtype: torch.dtype) -> None:
    _, w = sp.linear_inputs((8, 256, 512), dtype, torch.device("cuda"), 3)
    ours, theirs = cusparselt_plan.compress(w), torch._cslt_compress(w)
    assert ours.shape == theirs.shape == cusparselt.compressed_shape(w) and ours.dtype == theirs.dtype == dtype
    written = cusparselt_plan.compressed_nbytes(w)  # past it: columns' padding, never written
    assert torch.equal(ours.view(torch.uint8).flatten()[:written], theirs.view(torch.uint8).flatten()[:written])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("size", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_variant_matches_the_reference(size: tuple[int, int, int], dtype: torch.dtype) -> None:
    x, w = sp.linear_inputs(size, dtype, torch.device("cuda"), 0)
    expected, bound = _error_bound(x, w)
    for name in PLANNED:
        y = sp.linear24.impls[name].fn(x, w)
        assert y.shape == expected.shape and y.dtype == dtype and y.is_contiguous(), name
        err = (y.double() - expected).abs().max().item()
        assert err <= bound, f"{name}: max error {err:.3g} > {bound:.3g}"
    if size[0] > 1:  # a non-contiguous x (column-major) goes through a copy
        y = cusparselt_plan.linear(x.t().contiguous().t(), w)
        assert (y.double() - expected).abs().max().item() <= bound
    cusparselt_plan.PLANS.clear()
    cusparselt.CACHE.clear()


@pytest.mark.gpu
def test_an_in_place_write_to_the_weight_is_seen() -> None:
    x, w = sp.linear_inputs((64, 128, 256), torch.float16, torch.device("cuda"), 1)
    for kwargs in PLANNED.values():
        cusparselt_plan.linear(x, w, **kwargs)
        misses, plans = cusparselt.CACHE.misses, cusparselt_plan.PLANS.misses
        w.mul_(-0.5)  # still 2:4, other values
        expected, bound = _error_bound(x, w)
        y = cusparselt_plan.linear(x, w, **kwargs)
        assert (y.double() - expected).abs().max().item() <= bound
        assert cusparselt.CACHE.misses == misses + 1 and cusparselt_plan.PLANS.misses == plans  # plan reused


@pytest.mark.gpu
def test_compressed_by_torch_is_taken_as_it_is() -> None:
    """SparseLinear's buffers come from torch._cslt_compress: linear_compressed runs on them."""
    x, w = sp.linear_inputs((40, 128, 256), torch.bfloat16, torch.device("cuda"), 2)
    expected, bound = _error_bound(x, w)
    y = cusparselt_plan.linear_compressed(x, torch._cslt_compress(w), 128)
    assert (y.double() - expected).abs().max().item() <= bound
    with pytest.raises(ValueError, match="compressed weight has"):
        cusparselt_plan.linear_compressed(x, torch._cslt_compress(w), 256)


@pytest.mark.gpu
def test_a_call_is_cheap_on_the_host() -> None:
    x, w = sp.linear_inputs((8, 32, 64), torch.float16, torch.device("cuda"), 0)

    def host_seconds(fn) -> float:
        fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(200):
            fn()
        seconds = (time.perf_counter() - start) / 200
        torch.cuda.synchronize()
        return seconds

    hits = cusparselt_plan.PLANS.hits
    planned = host_seconds(lambda: cusparselt_plan.linear(x, w))
    assert cusparselt_plan.PLANS.hits >= hits + 200
    direct = host_seconds(lambda: sp.linear24.impls["cusparselt_direct"].fn(x, w))
    assert planned < direct / 4, f"host time per call: planned {planned * 1e6:.1f} us, torch {direct * 1e6:.1f} us"


@pytest.mark.gpu
def test_a_side_stream_and_a_cuda_graph() -> None:
    x, w = sp.linear_inputs((256, 512, 1024), torch.float16, torch.device("cuda"), 4)
    expected, bound = _error_bound(x, w)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for kwargs in PLANNED.values():
            y = cusparselt_plan.linear(x, w, **kwargs)
            assert (y.double() - expected).abs().max().item() <= bound
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = cusparselt_plan.linear(x, w)
    graph.replay()
    torch.cuda.synchronize()
    assert (y.double() - expected).abs().max().item() <= bound
