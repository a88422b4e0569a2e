"""cuSPARSELt with its set-up made once: y = x @ w.T as one cusparseLtMatmul per call.

Why. ``torch._cslt_sparse_mm`` builds the matmul descriptor, the algorithm selection and the plan on every call
(attribute and occupancy queries: about 1 ms of host time on the H100, more than the 337 us kernel at
4096x11008x4096 fp16), so in cold mode (one call after an L2 flush) the 2:4 matmul lost to dense F.linear.
Here, calling libcusparseLt directly (cusparselt_lib.py):

1. the compressed weight is made once per weight tensor, through ``CACHE`` of cusparselt.py (keyed on the tensor
   object and its version counter: an in-place write to w compresses it again); the call is PyTorch's own
   (cusparseLtSpMMACompress2 on a row-major (N, K) structured descriptor), so the bytes equal torch._cslt_compress;
2. a ``Plan`` (handle, the three matrix descriptors, matmul descriptor, algorithm selection, plan, workspace) is
   made once per (device, dtype, N, K, rows of x padded to 8, variant) and kept in ``PLANS``: it depends on shapes
   only, so every weight of one shape shares it, and a new weight of that shape (a training step's) needs only
   its compression;
3. a call checks shapes, looks both up, allocates y and calls cusparseLtMatmul on the current stream.

Layout, as PyTorch's cuSPARSELtOps.cpp (so results match torch._cslt_sparse_mm): A = w (N, K) row-major is the
structured operand; B = x (M, K) row-major with op TRANSPOSE; D = A B is (N, M). D is written row-major and
transposed into y by one tiled copy (transpose.py), or with ``fuse_transpose`` column-major, which is y row-major
with no copy (through torch that picked a 2.4x slower kernel on the H100: kept as a variant to measure). With
``search`` the algorithm is chosen once by cusparseLtMatmulSearch (it times the candidates on the first call's data).

Not handled: a bias (cusparselt.linear takes one); a workspace shared by two streams at once never happens (one
per stream). Plans and workspaces live until PLANS evicts them (at most MAX_PLANS) or the process ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from kernelkit.backends.lazy import kernel_module
from kernelkit.errors import BackendUnavailable
from kernelkit.ops.sparse24 import cusparselt_lib as lib
from kernelkit.ops.sparse24.cusparselt import CACHE, DENSE_ROWS, WeightCache, check_weight

transpose = kernel_module("kernelkit.ops.sparse24", "transpose")  # Triton: imported on the first planned call
KIND = "cusparselt_planned"  # the compressed weight's kind in the weight cache
MAX_PLANS = 64  # plans kept (least recently used dropped): shapes, not calls; each holds a few KB and a workspace
DTYPES = {torch.float16: lib.CUDA_R_16F, torch.bfloat16: lib.CUDA_R_16BF}


class PlanKey(NamedTuple):
    """What a plan depends on: the device, the dtype, w's (N, K), x's rows padded to DENSE_ROWS, the variant."""

    device: int
    dtype: torch.dtype
    n_out: int
    n_in: int
    rows: int
    fuse_transpose: bool
    search: bool


def unavailable(x: torch.Tensor, w: torch.Tensor) -> str | None:
    """Why the planned matmul cannot run on x and w here, or None when it can (loads the library once)."""
    if not (x.is_cuda and w.is_cuda):
        where = "no GPU here" if not torch.cuda.is_available() else "the inputs are not on the GPU"
        return f"cuSPARSELt runs on CUDA tensors only ({where})"
    major, minor = torch.cuda.get_device_capability(w.device)
    if major < 8:
        return f"cuSPARSELt's 2:4 matmul needs compute capability 8.0 or later; this GPU is sm_{major}{minor}"
    try:
        lib.library()
    except BackendUnavailable as exc:
        return str(exc)
    return None


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _on_device(index: int) -> contextlib.AbstractContextManager:
    """A launch must run with its stream's device current: switch only where it is not (the switch costs us)."""
    return contextlib.nullcontext() if torch.cuda.current_device() == index else torch.cuda.device(index)


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t itself where it is contiguous and 16-byte aligned (what the descriptors promise), else a copy that is."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


@functools.cache
def handle(device: int) -> lib.Blob:
    """The cuSPARSELt handle of one GPU (made once: cusparseLtInit reads the current device's properties)."""
    blob = lib.Blob()
    with torch.cuda.device(device):
        try:
            lib.library().call("cusparseLtInit", blob.ptr)
        except lib.CusparseLtError as exc:
            if exc.status in (lib.CUSPARSE_STATUS_ARCH_MISMATCH, lib.CUSPARSE_STATUS_NOT_SUPPORTED):
                raise BackendUnavailable(f"cuSPARSELt does not run on this GPU: {exc}") from exc
            raise
    return blob


def _sparse_descriptor(handle_ptr: int, n_out: int, n_in: int, dtype: torch.dtype) -> lib.Blob:
    """w (N, K) row-major, 2:4 along K, 16-byte aligned: the descriptor torch._cslt_compress uses."""
    blob = lib.Blob()
    lib.library().call("cusparseLtStructuredDescriptorInit", handle_ptr, blob.ptr, n_out, n_in, n_in, 16,
                       DTYPES[dtype], lib.CUSPARSE_ORDER_ROW, lib.CUSPARSELT_SPARSITY_50_PERCENT)
    return blob


def compressed_size(handle_ptr: int, desc: lib.Blob, scratch_size: ctypes.c_size_t | None = None) -> int:
    """Bytes of the compressed form of the structured operand ``desc`` (and, into scratch_size, of the temporary
    buffer compressing it needs)."""
    size, scratch = ctypes.c_size_t(), scratch_size if scratch_size is not None else ctypes.c_size_t()
    lib.library().call("cusparseLtSpMMACompressedSize2", handle_ptr, desc.ptr, ctypes.byref(size),
                       ctypes.byref(scratch))
    return size.value


def compress(w: torch.Tensor) -> torch.Tensor:
    """w (N, K) fp16/bf16, pruned 2:4 along K -> its compressed form (values and metadata in cuSPARSELt's layout),
    written on the current stream, in the tensor torch._cslt_compress allocates: w's dtype, N rows, as many columns
    as the bytes need (cusparselt.compressed_shape; torch._cslt_sparse_mm reads N from its rows)."""
    check_weight(w)
    w = _aligned(w)
    device = _index(w.device)
    h = handle(device).ptr
    desc = _sparse_descriptor(h, w.shape[0], w.shape[1], w.dtype)
    cusparselt = lib.library()
    try:
        scratch_size = ctypes.c_size_t()
        size = compressed_size(h, desc, scratch_size)
        row_bytes = w.shape[0] * w.element_size()
        packed = w.new_empty((w.shape[0], -(-size // row_bytes)))
        scratch = torch.empty(max(scratch_size.value, 1), dtype=torch.uint8, device=w.device)
        stream = torch.cuda.current_stream(w.device).cuda_stream
        with _on_device(device):
            cusparselt.call("cusparseLtSpMMACompress2", h, desc.ptr, 1, lib.CUSPARSE_OPERATION_NON_TRANSPOSE,
                            w.data_ptr(), packed.data_ptr(), scratch.data_ptr(), stream)
    finally:
        cusparselt.call("cusparseLtMatDescriptorDestroy", desc.ptr)
    return packed


def compressed_nbytes(w: torch.Tensor) -> int:
    """Bytes of w's compressed form that cuSPARSELt writes (compress's tensor may have a few more: whole columns)."""
    check_weight(w)
    h = handle(_index(w.device)).ptr
    desc = _sparse_descriptor(h, w.shape[0], w.shape[1], w.dtype)
    try:
        return compressed_size(h, desc)
    finally:
        lib.library().call("cusparseLtMatDescriptorDestroy", desc.ptr)


def compressed(w: torch.Tensor, cache: WeightCache = CACHE, make: Callable[[torch.Tensor], torch.Tensor] = compress
               ) -> torch.Tensor:
    """make(w) (compress), once per weight tensor until it is written in place (``cache`` says how)."""
    return cache.get(w, KIND, make)


class Plan:
    """Everything cusparseLtMatmul needs for one PlanKey, made once; ``run`` is the only per-call work."""

    def __init__(self, key: PlanKey, packed: torch.Tensor, dense: torch.Tensor) -> None:
        cusparselt, self.key = lib.library(), key
        self._handle = handle(key.device)
        h, kind = self._handle.ptr, DTYPES[key.dtype]
        self._a = _sparse_descriptor(h, key.n_out, key.n_in, key.dtype)
        self._b, self._d = lib.Blob(), lib.Blob()
        cusparselt.call("cusparseLtDenseDescriptorInit", h, self._b.ptr, key.rows, key.n_in, key.n_in, 16, kind,
                        lib.CUSPARSE_ORDER_ROW)
        order, ld = ((lib.CUSPARSE_ORDER_COL, key.n_out) if key.fuse_transpose
                     else (lib.CUSPARSE_ORDER_ROW, key.rows))
        cusparselt.call("cusparseLtDenseDescriptorInit", h, self._d.ptr, key.n_out, key.rows, ld, 16, kind, order)
        self._matmul, self._alg, self._plan = lib.Blob(), lib.Blob(), lib.Blob()
        cusparselt.call("cusparseLtMatmulDescriptorInit", h, self._matmul.ptr, lib.CUSPARSE_OPERATION_NON_TRANSPOSE,
                        lib.CUSPARSE_OPERATION_TRANSPOSE, self._a.ptr, self._b.ptr, self._d.ptr, self._d.ptr,
                        lib.CUSPARSE_COMPUTE_32F)
        cusparselt.call("cusparseLtMatmulAlgSelectionInit", h, self._alg.ptr, self._matmul.ptr,
                        lib.CUSPARSELT_MATMUL_ALG_DEFAULT)
        cusparselt.call("cusparseLtMatmulPlanInit", h, self._plan.ptr, self._matmul.ptr, self._alg.ptr)
        # Freed with the plan (host memory of the library), not at exit: the process's end frees it anyway.
        weakref.finalize(self, _destroy, self._plan, self._alg, (self._a, self._b, self._d)).atexit = False
        self._alpha, self._beta = ctypes.c_float(1.0), ctypes.c_float(0.0)  # host scalars, compute type 32F
        self.compressed_bytes = compressed_size(h, self._a)
        self._streams: dict[int, tuple[ctypes.Array, int | None, torch.Tensor | None]] = {}
        self.workspace_bytes = self._workspace_size()
        if key.search:
            self.check(packed)  # the search reads it
            self._search(packed, dense)
        self.alg_id = self._config_id()

    def check(self, packed: torch.Tensor) -> None:
        """ValueError unless packed is large enough to be this plan's compressed weight (the kernel would read
        past its end: a wrong n_out or dtype)."""
        if packed.nbytes < self.compressed_bytes:
            key = self.key
            raise ValueError(f"the compressed weight has {packed.nbytes} bytes; a ({key.n_out}, {key.n_in}) "
                             f"{key.dtype} weight's has {self.compressed_bytes}")

    def _workspace_size(self) -> int:
        size = ctypes.c_size_t()
        lib.library().call("cusparseLtMatmulGetWorkspace", self._handle.ptr, self._plan.ptr, ctypes.byref(size))
        return size.value

    def _config_id(self) -> int:
        value = ctypes.c_int()
        lib.library().call("cusparseLtMatmulAlgGetAttribute", self._handle.ptr, self._alg.ptr,
                           lib.CUSPARSELT_MATMUL_ALG_CONFIG_ID, ctypes.byref(value), ctypes.sizeof(value))
        return value.value

    def _search(self, packed: torch.Tensor, dense: torch.Tensor) -> None:
        """cusparseLtMatmulSearch: times the candidate kernels on this data and keeps the fastest in the plan (it
        writes D, here a scratch output). A kernel it picks may want a larger workspace: asked again after."""
        out = self.new_output(dense)
        streams, workspace, _ = self._for_stream(dense.device)
        with _on_device(self.key.device):
            lib.library().call("cusparseLtMatmulSearch", self._handle.ptr, self._plan.ptr,
                               ctypes.byref(self._alpha), packed.data_ptr(), dense.data_ptr(),
                               ctypes.byref(self._beta), out.data_ptr(), out.data_ptr(), workspace, streams, 1)
        self.workspace_bytes = self._workspace_size()
        self._streams.clear()

    def _for_stream(self, device: torch.device) -> tuple[ctypes.Array, int | None, torch.Tensor | None]:
        """(the stream array cusparseLtMatmul takes, the workspace's address) for the current stream: one workspace
        per stream, allocated on it, so calls on two streams never share one."""
        stream = torch.cuda.current_stream(device).cuda_stream
        entry = self._streams.get(stream)
        if entry is None:
            workspace = (torch.empty(self.workspace_bytes, dtype=torch.uint8, device=device)
                         if self.workspace_bytes else None)
            entry = ((ctypes.c_void_p * 1)(stream), workspace.data_ptr() if workspace is not None else None, workspace)
            self._streams[stream] = entry
        return entry

    def new_output(self, dense: torch.Tensor) -> torch.Tensor:
        """D, uninitialised: (N, rows) row-major, or (rows, N) row-major (= D column-major) with fuse_transpose."""
        shape = (self.key.rows, self.key.n_out) if self.key.fuse_transpose else (self.key.n_out, self.key.rows)
        return torch.empty(shape, dtype=dense.dtype, device=dense.device)

    def run(self, packed: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        """D = w @ dense.T from the compressed w: dense (rows, K) contiguous, 16-byte aligned -> new_output's D."""
        out = self.new_output(dense)
        streams, workspace, _ = self._for_stream(dense.device)
        with _on_device(self.key.device):
            status = lib.library().functions["cusparseLtMatmul"](
                self._handle.ptr, self._plan.ptr, ctypes.byref(self._alpha), packed.data_ptr(), dense.data_ptr(),
                ctypes.byref(self._beta), out.data_ptr(), out.data_ptr(), workspace, streams, 1)
        if status:
            raise lib.CusparseLtError("cusparseLtMatmul", status, lib.library().error_string(status))
        return out


def _destroy(plan: lib.Blob, alg: lib.Blob, descriptors: tuple[lib.Blob, ...]) -> None:
    cusparselt = lib.library()
    cusparselt.call("cusparseLtMatmulPlanDestroy", plan.ptr)
    cusparselt.call("cusparseLtMatmulAlgSelectionDestroy", alg.ptr)
    for desc in descriptors:
        cusparselt.call("cusparseLtMatDescriptorDestroy", desc.ptr)


class PlanCache:
    """Plans by PlanKey, the MAX_PLANS most recently used kept; ``make(key)`` builds a missing one."""

    def __init__(self, max_plans: int = MAX_PLANS) -> None:
        self._plans: OrderedDict[PlanKey, Plan] = OrderedDict()
        self._lock = threading.Lock()
        self.max_plans, self.hits, self.misses = max_plans, 0, 0

    def get(self, key: PlanKey, make: Callable[[PlanKey], Plan]) -> Plan:
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                self.hits += 1
                return plan
        plan = make(key)  # outside the lock: a search launches kernels and waits for them
        with self._lock:
            self.misses += 1
            self._plans[key] = plan
            while len(self._plans) > self.max_plans:
                self._plans.popitem(last=False)
        return plan

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


PLANS = PlanCache()  # one per process, shared by every planned call


def _dense_operand(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x as cuSPARSELt's B: contiguous, 16-byte aligned, its rows padded with zeros to ``rows``."""
    return F.pad(x, (0, 0, 0, rows - x.shape[0])) if rows != x.shape[0] else _aligned(x)


def linear_compressed(x: torch.Tensor, packed: torch.Tensor, n_out: int, *, fuse_transpose: bool = False,
                      search: bool = False) -> torch.Tensor:
    """y = x @ w.T from w's compressed form (this module's compress or torch._cslt_compress: the same bytes).

    x (M, K) fp16/bf16 CUDA; packed: w (n_out, K) compressed, on x's device; -> y (M, n_out) contiguous, x's dtype.
    """
    reason = unavailable(x, packed)
    if reason:
        raise BackendUnavailable(reason)
    return _linear_compressed(x, packed, n_out, fuse_transpose, search)


def _linear_compressed(x: torch.Tensor, packed: torch.Tensor, n_out: int, fuse_transpose: bool, search: bool
                       ) -> torch.Tensor:
    if x.dim() != 2 or x.dtype not in DTYPES:
        raise ValueError(f"x must be a 2-D float16 or bfloat16 matrix, got {x.dim()}-D {x.dtype}")
    n_rows, n_in = x.shape
    if n_rows == 0:
        return x.new_empty((0, n_out))
    rows = n_rows + (-n_rows % DENSE_ROWS)
    dense = _dense_operand(x, rows)
    key = PlanKey(_index(x.device), x.dtype, n_out, n_in, rows, fuse_transpose, search)
    if packed.device != x.device:
        raise ValueError(f"the compressed weight is on {packed.device}, x on {x.device}")
    plan = PLANS.get(key, lambda k: Plan(k, packed, dense))
    plan.check(packed)
    out = plan.run(packed, dense)
    if fuse_transpose:
        return out[:n_rows] if rows != n_rows else out
    return transpose.transposed_rows(out, n_rows)


def linear(x: torch.Tensor, w: torch.Tensor, *, fuse_transpose: bool = False, search: bool = False) -> torch.Tensor:
    """y = x @ w.T on cuSPARSELt with the compression and the plan cached: x (M, K), w (N, K) pruned 2:4 along K,
    both fp16 or both bf16 on one GPU -> y (M, N) contiguous. BackendUnavailable where it cannot run."""
    reason = unavailable(x, w)
    if reason:
        raise BackendUnavailable(reason)
    if x.dtype != w.dtype or x.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"x {tuple(x.shape)} {x.dtype} does not match w {tuple(w.shape)} {w.dtype}")
    return _linear_compressed(x, compressed(w), w.shape[0], fuse_transpose, search)
