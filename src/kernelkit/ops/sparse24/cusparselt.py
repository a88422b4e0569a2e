"""cuSPARSELt through PyTorch: the compressed-weight cache and the direct 2:4 matmul.

Why a cache. Compressing a weight (``to_sparse_semi_structured`` / ``torch._cslt_compress``) reads the dense
matrix and writes values and metadata: in inference it is done once, not per call. An impl of ``linear24`` only
receives the op's inputs (x, w), so it looks the compressed form up in ``CACHE``, keyed on the weight *input*:

- the key is the tensor object itself (``torch.utils.weak.WeakIdKeyDictionary``: identity, held weakly, the
  entry dropped when the tensor dies, so a new tensor at a reused id or address never finds an old entry);
- an entry is valid only while the tensor's version counter, shape, strides, dtype and device are those it was
  made from: any in-place write to w (``w.add_``, ``w.copy_``, an optimizer step) bumps the version and misses.

What is stored is derived from the input, never an output: a call on a different input (the checker's second
input set, or the same values in a fresh tensor) compresses that input again, so the cache cannot replay an
earlier answer. Writes that bypass the version counter (through ``w.data``) are not seen: call
``CACHE.clear()`` after them. Inference tensors (``torch.inference_mode``) have no version counter and are
compressed on every call.

The alternative, making the compressed weight an input of the op, was not taken: the compressed form exists only
on a GPU, in cuSPARSELt's undocumented layout, so the reference (which runs on any device, in float64) could not
read it, and the checker's input factory would depend on the impl being checked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

from kernelkit.errors import BackendUnavailable
from kernelkit.ops.sparse24 import layout

SPARSE_MULTIPLE = 16  # fp16/bf16: cuSPARSELt's sparse operand has both dimensions multiples of 16
DENSE_ROWS = 8  # ... and the dense operand's rows a multiple of 8 (PyTorch pads to it, and so does linear())
CUTLASS_MESSAGE = "Supported only on GPUs with compute capability 8.x"  # PyTorch's own words, from the kernel


class WeightCache:
    """Values derived from weight tensors (their compressed forms), per tensor object and kind of value."""

    def __init__(self) -> None:
        self._entries: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.hits = 0
        self.misses = 0

    def get(self, weight: torch.Tensor, kind: str, make: Callable[[torch.Tensor], Any]) -> Any:
        """``make(weight)``, or what it returned for this same tensor, unchanged since, under ``kind``."""
        try:
            stamp = (weight._version, tuple(weight.shape), weight.stride(), weight.dtype, weight.device)
        except RuntimeError:  # an inference tensor: no version counter, so nothing can prove it unchanged
            self.misses += 1
            return make(weight)
        kinds = self._entries.setdefault(weight, {})
        entry = kinds.get(kind)
        if entry is not None and entry[0] == stamp:
            self.hits += 1
            return entry[1]
        self.misses += 1
        value = make(weight)
        kinds[kind] = (stamp, value)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return sum(len(kinds) for kinds in self._entries.values())


CACHE = WeightCache()  # one per process: what the linear24 impls share


def require_cusparselt(*tensors: torch.Tensor) -> None:
    """BackendUnavailable (the case is SKIPPED) unless every tensor is on a GPU and torch has cuSPARSELt."""
    if not all(t.is_cuda for t in tensors):
        where = "no GPU here" if not torch.cuda.is_available() else "the inputs are not on the GPU"
        raise BackendUnavailable(f"cuSPARSELt runs on CUDA tensors only ({where})")
    if not torch.backends.cusparselt.is_available():
        raise BackendUnavailable("this torch build has no cuSPARSELt (torch.backends.cusparselt.is_available())")


def cutlass_unavailable() -> str | None:
    """Why PyTorch's CUTLASS 2:4 kernels cannot run here, or None when they can (a GPU of compute capability 8.x)."""
    if not torch.cuda.is_available():
        return f"no GPU here; PyTorch's CUTLASS 2:4 kernels are \"{CUTLASS_MESSAGE}\""
    major, minor = torch.cuda.get_device_capability()
    if major != 8:
        return f"PyTorch's CUTLASS 2:4 kernels are \"{CUTLASS_MESSAGE}\"; this GPU is sm_{major}{minor}"
    return None


def check_weight(w: torch.Tensor) -> None:
    """ValueError unless w is a 2-D fp16/bf16 matrix cuSPARSELt can take as its sparse operand."""
    if w.dim() != 2 or w.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"the 2:4 weight must be a 2-D float16 or bfloat16 matrix, got {w.dim()}-D {w.dtype}")
    if w.shape[0] % SPARSE_MULTIPLE or w.shape[1] % SPARSE_MULTIPLE:
        raise ValueError(f"cuSPARSELt needs both weight dimensions to be multiples of {SPARSE_MULTIPLE}, "
                         f"got {tuple(w.shape)}")


@contextlib.contextmanager
def _forced_cutlass(cutlass: bool) -> Iterator[None]:
    """to_sparse_semi_structured picks its backend from a class flag: set it for one call, then restore it."""
    from torch.sparse import SparseSemiStructuredTensor

    before = SparseSemiStructuredTensor._FORCE_CUTLASS
    SparseSemiStructuredTensor._FORCE_CUTLASS = cutlass
    try:
        yield
    finally:
        SparseSemiStructuredTensor._FORCE_CUTLASS = before


def to_semi_structured(w: torch.Tensor, cutlass: bool = False) -> torch.Tensor:
    """``torch.sparse.to_sparse_semi_structured(w)`` with the backend chosen (cuSPARSELt unless ``cutlass``)."""
    from torch.sparse import to_sparse_semi_structured

    check_weight(w)
    with _forced_cutlass(cutlass):
        return to_sparse_semi_structured(w.contiguous())


def semi_structured(w: torch.Tensor, cutlass: bool = False) -> torch.Tensor:
    """The SparseSemiStructuredTensor of the pruned weight w, made once per weight (see CACHE)."""
    require_cusparselt(w)
    kind = "semi_structured_cutlass" if cutlass else "semi_structured_cusparselt"
    return CACHE.get(w, kind, lambda t: to_semi_structured(t, cutlass))


def compressed_shape(w: torch.Tensor) -> tuple[int, int]:
    """Shape of torch._cslt_compress(w) for a 16-bit w (N, K) on sm_90: N rows, whole columns enough for the kept
    half and the metadata (N K / 8 bytes over N padded to 64 and K to 32, rounded up to 512 bytes): 9K/16 where N
    and K are multiples of 64.
    PyTorch allocates so; torch's matmul reads N from the rows (layout.py has the layout)."""
    return layout.compressed_shape(*w.shape)


def compress(w: torch.Tensor) -> torch.Tensor:
    """torch._cslt_compress of the pruned weight (N, K): values and metadata in cuSPARSELt's layout, shaped
    compressed_shape(w) (older torch returns the same elements 1-D; torch._cslt_sparse_mm of 2.11 wants them 2-D,
    and torch.compile checks the shape against the custom op's fake)."""
    check_weight(w)
    packed = torch._cslt_compress(w.contiguous())
    shape = compressed_shape(w)
    if packed.numel() != shape[0] * shape[1]:
        raise RuntimeError(f"torch._cslt_compress gave {packed.numel()} elements for a {tuple(w.shape)} weight; "
                           f"kernelkit expects {shape[0]} x {shape[1]}: this torch's cuSPARSELt layout is not "
                           f"supported, use the dense backend (SparseLinear(..., backend='dense'))")
    return packed.reshape(shape)


def compressed(w: torch.Tensor) -> torch.Tensor:
    """compress(w), made once per weight (see CACHE)."""
    require_cusparselt(w)
    return CACHE.get(w, "cslt_compress", compress)


def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None, *,
           fuse_transpose: bool = False) -> torch.Tensor:
    """y = x @ w.T + bias from w's compressed form: x (M, K) -> y (M, N) contiguous.

    cuSPARSELt computes w @ x.T with w the sparse operand, an (N, M) product. By default it is written row-major
    and transposed into y by one copy (M N elements read and written). ``fuse_transpose`` has cuSPARSELt write it
    column-major instead (``transpose_result``), which is y row-major with no copy, but on the H100 (torch 2.11,
    cuSPARSELt 0.8, 2026-11-23, fp16 4096x11008x4096) that picked a kernel 2.4x slower (800 us against 337 us)
    and spent ~225 ms of host time per call inside ``_cslt_sparse_mm``: it is kept as the ``cusparselt_fused_t``
    impl to show it. Rows of x are padded to a multiple of 8 (cuSPARSELt's smallest dense tile) and the padding's
    rows of y dropped.
    """
    require_cusparselt(x, packed)
    n_rows = x.shape[0]
    pad = -n_rows % DENSE_ROWS
    dense = F.pad(x, (0, 0, 0, pad)) if pad else x.contiguous()
    if fuse_transpose:
        y = torch._cslt_sparse_mm(packed, dense.t(), bias=bias, transpose_result=True)
    else:
        y = torch._cslt_sparse_mm(packed, dense.t(), bias=bias).t()
    y = y[:n_rows] if pad else y
    return y.contiguous()
