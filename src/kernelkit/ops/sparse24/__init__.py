"""2:4 semi-structured sparsity: magnitude pruning (row-wise and transposable) and the 2:4-sparse linear layer.

Ops (fp16 and bf16; fp32 too for the sparsifiers, for CPU checks):

- ``sparsify24(x)``: x (M, K), K a multiple of 4 -> the pruned (M, K) matrix, contiguous. In every group of four
  consecutive elements of a row it keeps the two largest by |x| and zeroes the others; of equal magnitudes the
  lower index wins (so -3 beats a later 3, and of several zeros the first ones are kept). Inputs must be finite.
  Impls: ``eager_topk`` (PyTorch's way: topk over groups of four, the thing to beat), ``triton_rowwise`` (one
  pass: each program prunes a tile in registers).
- ``sparsify24_transposable(x)``: x (M, K), M and K multiples of 4 -> the pruned matrix whose mask keeps two of
  four along every row and every column of each 4x4 block, so x and x.T are both 2:4 (training needs W and W^T).
  Each block keeps the best of the 90 such masks by kept magnitude (patterns.py: the order, the tie rule and the
  float32 scores). ``checks.kept_vs_rowwise`` reports what that costs against the row-wise mask.
  Impl: ``triton_blocks``; the launcher ``prune_transposable(x, transposed=True)`` also writes the pruned x.T.
- ``linear24(x, w)``: y = x @ w.T with w 2:4-sparse along K. x (M, K), w (N, K) already pruned by sparsify24;
  size (M, N, K). Impls: ``eager_dense`` (F.linear: the dense baseline), ``cusparselt``
  (``to_sparse_semi_structured`` then F.linear, as PyTorch documents it), ``cusparselt_direct`` (one
  ``torch._cslt_sparse_mm`` and a transposing copy, what ``SparseLinear`` runs), ``cusparselt_fused_t`` (the same
  with cuSPARSELt writing y row-major itself: slower on the H100, see cusparselt.linear), ``cutlass`` (sm_8x only),
  and ``cusparselt_planned`` (libcusparseLt called directly, its plan made once per shape: no per-call set-up;
  cusparselt_plan.py) with its variants ``cusparselt_planned_search`` (algorithm timed once by
  cusparseLtMatmulSearch) and ``cusparselt_planned_fused_t`` (y written row-major by cuSPARSELt, no copy).
  Each weight is compressed once and cached (cusparselt.py says how and why the cache cannot replay outputs).

What cuSPARSELt takes. ``to_sparse_semi_structured`` takes the pruned dense matrix and nothing else (read in
torch 2.13 and in an earlier release; the GPU machine's 2.11 lies between):
``SparseSemiStructuredTensorCUSPARSELT.from_dense`` hands it to ``torch._cslt_compress``, which lets cuSPARSELt
write values and metadata into one buffer in cuSPARSELt's own undocumented layout (9/16 of the dense size for
16-bit types). So the sparsifiers deliver the pruned dense matrix at memory speed; a compressed form written here
could not be verified against a documented layout, and there is none.

Checks specific to sparsity (group counts in both directions, kept values the largest with the tie rule, kept
magnitude against the best mask) are in checks.py; the reference comparison already fails any wrong mask, because
a wrongly kept or dropped element changes the output by a whole input value. ``SparseLinear`` (module.py) is the
nn.Linear drop-in, for inference (pruned once) and training (pruned every step).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
import torch.nn.functional as F

from kernelkit.backends.lazy import kernel_module
from kernelkit.errors import BackendUnavailable
from kernelkit.ops.sparse24 import cusparselt, cusparselt_plan, patterns
from kernelkit.spec import Size, op, seeded_normal

triton_kernels = kernel_module(__name__, "triton")

SPARSIFY_DTYPES = [torch.float16, torch.bfloat16, torch.float32]
LINEAR_DTYPES = [torch.float16, torch.bfloat16]  # what cuSPARSELt's 2:4 matmul takes (fp8/int8 aside)


def check_groups(x: torch.Tensor, transposable: bool = False) -> None:
    """Raise ValueError unless x is a 2-D floating tensor with K (and M, for 4x4 blocks) a multiple of 4."""
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"2:4 pruning takes a 2-D floating tensor (M, K), got {x.dim()}-D {x.dtype}")
    n_rows, n_cols = x.shape
    if n_cols % 4 or (transposable and n_rows % 4):
        need = "M and K" if transposable else "K"
        raise ValueError(f"2:4 pruning needs {need} to be a multiple of 4 (groups of four), got {n_rows} x {n_cols}")


def nonzero_normal(size: Size, dtype: torch.dtype, device: torch.device | str, seed: int) -> torch.Tensor:
    """A seeded normal tensor in ``dtype`` with no exact zeros (the rare tiny draw that rounds to 0 becomes the
    dtype's smallest normal), so every group of four has four non-zeros and "exactly two kept" is visible."""
    x = seeded_normal(size, dtype, device, seed)
    return torch.where(x == 0, torch.finfo(dtype).tiny, x)


def _sparsify_inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[torch.Tensor]:
    return (nonzero_normal(size, dtype, device, seed),)


def _copy_bytes(x: torch.Tensor) -> int:
    return 2 * x.numel() * x.element_size()


# Reference. bytes: read MK + write MK elements (a copy's traffic: the ideal). The eager topk way moves several
# times that (abs, keys, topk, scatter, where: about 9 passes).
@op(
    # Edges: the target square; a weight's shape; rows of 780 (in fp16 most rows start off a 16-byte boundary)
    # and an odd row count; one row, one group past a block; one group per row.
    sizes=[(8192, 8192), (11008, 4096), (1823, 780), (1, 4100), (3, 4)],
    # One program's tile in the interpreter is 16 x 64: these span 1, 3, 3 and 1 programs, with masked edges.
    cpu_sizes=[(7, 36), (1, 132), (33, 64), (2, 4)],
    dtypes=SPARSIFY_DTYPES,
    inputs=_sparsify_inputs,
    bytes=_copy_bytes,
    bench_sizes=[(8192, 8192), (11008, 4096), (4096, 4096), (16384, 16384)],
)
def sparsify24(x: torch.Tensor) -> torch.Tensor:
    """Keep the two largest |x| of every four consecutive elements of a row (lower index wins ties)."""
    check_groups(x)
    groups = x.reshape(x.shape[0], x.shape[1] // 4, 4)
    # A stable descending sort lists equal magnitudes in index order: the first two are the kept ones.
    order = groups.abs().sort(dim=-1, descending=True, stable=True).indices
    keep = torch.zeros(groups.shape, dtype=torch.bool, device=x.device).scatter_(-1, order[..., :2], True)
    return torch.where(keep, groups, 0).reshape(x.shape)


# Reference. bytes: read MK + write MK elements. No flops: the ~30 compares and adds per element (the scan over
# 90 masks) are not what a matmul-rate ceiling measures.
@op(
    # Edges: the target square; a weight's shape; odd tile counts both ways; one row of blocks, one past a tile;
    # a single block.
    sizes=[(8192, 8192), (11008, 4096), (1820, 780), (4, 4100), (4, 4)],
    cpu_sizes=[(8, 36), (4, 72), (20, 12)],  # the interpreter's tile is 16 x 64: 1, 2 and 2 programs
    dtypes=SPARSIFY_DTYPES,
    inputs=_sparsify_inputs,
    bytes=_copy_bytes,
    bench_sizes=[(8192, 8192), (11008, 4096), (4096, 11008)],
)
def sparsify24_transposable(x: torch.Tensor) -> torch.Tensor:
    """Keep, in every 4x4 block, the best of the 90 masks that keep two of four along each row and column."""
    check_groups(x, transposable=True)
    n_rows, n_cols = x.shape
    blocks = x.reshape(n_rows // 4, 4, n_cols // 4, 4).permute(0, 2, 1, 3)  # (block row, block col, r, c)
    scores = patterns.transposable_scores(blocks.abs().to(torch.float32))  # float32 whatever x's dtype: see patterns
    keep = patterns.transposable_masks(x.device)[scores.argmax(dim=-1)]  # argmax: the first of equal maxima
    return torch.where(keep, blocks, 0).permute(0, 2, 1, 3).reshape(n_rows, n_cols)


def linear_inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) seeded normal; w (N, K) a seeded normal pruned 2:4 by the sparsify24 reference."""
    n_rows, n_out, n_in = size
    x = seeded_normal((n_rows, n_in), dtype, device, seed * 1009)
    w = sparsify24(nonzero_normal((n_out, n_in), dtype, device, seed * 1009 + 1))
    return x, w


# Reference. bytes: read x (MK) and w (NK, dense; the compressed w is 9/16 of that) + write y (MN) elements.
# flops: 2MNK, the dense count, so a 2:4 kernel's rate reads as "dense-equivalent"; it compares with the 2:4 tensor
# cores' rate, twice the dense one (compute_dtype "sparse24"): the dense baseline then reads at most ~50%.
@op(
    # The three shapes of the target (MLP up and down projections, a wide square); one row (cuSPARSELt pads the
    # dense operand to 8 rows); an odd row count. N and K are multiples of 16: cuSPARSELt's smallest sparse tile.
    sizes=[(4096, 11008, 4096), (4096, 4096, 11008), (1024, 16384, 16384), (1, 64, 128), (37, 48, 80)],
    cpu_sizes=[(7, 16, 32), (1, 8, 12), (5, 24, 36)],
    dtypes=LINEAR_DTYPES,
    inputs=linear_inputs,
    bytes=lambda x, w: (x.numel() + w.numel() + x.shape[0] * w.shape[0]) * x.element_size(),
    flops=lambda x, w: 2 * x.shape[0] * w.shape[0] * x.shape[1],
    bench_sizes=[(4096, 11008, 4096), (4096, 4096, 11008), (1024, 16384, 16384)],
    compute_dtype="sparse24",
)
def linear24(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = x @ w.T for a 2:4-sparse w: the dense product (the zeros of w add nothing)."""
    return F.linear(x, w)


# Launchers ----------------------------------------------------------------------------------------------------

def prune_rowwise(x: torch.Tensor) -> torch.Tensor:
    """sparsify24 by the Triton kernel: (M, K) any strides -> pruned (M, K) contiguous."""
    import triton

    check_groups(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if y.numel():
        n_rows, n_cols = x.shape
        grid = lambda meta: (triton.cdiv(n_rows, meta["BLOCK_M"]), triton.cdiv(n_cols, meta["BLOCK_K"]))
        triton_kernels.sparsify24_rowwise_kernel[grid](x, y, n_rows, n_cols, x.stride(0), x.stride(1), y.stride(0))
    return y


def prune_transposable(x: torch.Tensor, transposed: bool = False
                       ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """sparsify24_transposable by the Triton kernel: (M, K) -> pruned (M, K), and with ``transposed`` also the
    pruned x.T as a contiguous (K, M) tensor written by the same pass (what W^T's compression reads)."""
    import triton

    check_groups(x, transposable=True)
    n_rows, n_cols = x.shape
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    yt = torch.empty((n_cols, n_rows), dtype=x.dtype, device=x.device) if transposed else y
    if y.numel():
        grid = lambda meta: (triton.cdiv(n_rows, meta["BLOCK_M"]), triton.cdiv(n_cols, meta["BLOCK_K"]))
        triton_kernels.sparsify24_transposable_kernel[grid](x, y, yt, n_rows, n_cols, x.stride(0), x.stride(1),
                                                            WRITE_T=transposed)
    return (y, yt) if transposed else y


# Impls: sparsify24 ---------------------------------------------------------------------------------------------

@sparsify24.impl("eager_topk")
def sparsify24_eager_topk(x: torch.Tensor) -> torch.Tensor:
    """PyTorch's way: topk(2) over groups of four, on integer keys that make it follow the tie rule."""
    check_groups(x)
    if x.element_size() not in (2, 4):
        raise TypeError(f"eager_topk takes 16- and 32-bit floats, got {x.dtype}")
    groups = x.reshape(x.shape[0], x.shape[1] // 4, 4)
    # topk does not promise which of equal values it returns. The bits of |x| order non-negative floats as
    # integers do; times 4 plus (3 - index), a tie goes to the lower index and every key is distinct.
    as_int, wide = (torch.int16, torch.int32) if x.element_size() == 2 else (torch.int32, torch.int64)
    keys = groups.abs().view(as_int).to(wide) * 4 + torch.arange(3, -1, -1, dtype=wide, device=x.device)
    keep = torch.zeros(groups.shape, dtype=torch.bool, device=x.device)
    keep.scatter_(-1, keys.topk(2, dim=-1).indices, True)
    return torch.where(keep, groups, 0).reshape(x.shape)


@sparsify24.impl("triton_rowwise", kernels=[triton_kernels.lazy("sparsify24_rowwise_kernel")])
def sparsify24_triton_rowwise(x: torch.Tensor) -> torch.Tensor:
    """Triton, one pass: each program loads a tile, keeps two of each four with six compares, writes it."""
    return prune_rowwise(x)


# Impls: sparsify24_transposable ---------------------------------------------------------------------------------

@sparsify24_transposable.impl("triton_blocks", kernels=[triton_kernels.lazy("sparsify24_transposable_kernel")])
def sparsify24_transposable_triton_blocks(x: torch.Tensor) -> torch.Tensor:
    """Triton, one pass: each program takes a tile of 4x4 blocks and scans the 90 masks in registers."""
    return prune_transposable(x)


# Impls: linear24 ------------------------------------------------------------------------------------------------

@linear24.impl("eager_dense")
def linear24_eager_dense(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """F.linear on the pruned weight as a dense matrix: the baseline to beat."""
    return F.linear(x, w)


@linear24.impl("cusparselt", backend="eager", dtypes=LINEAR_DTYPES)
def linear24_cusparselt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """cuSPARSELt through PyTorch's documented path: to_sparse_semi_structured (cached per weight), F.linear."""
    return F.linear(x, cusparselt.semi_structured(w))


@linear24.impl("cusparselt_direct", backend="eager", dtypes=LINEAR_DTYPES)
def linear24_cusparselt_direct(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """cuSPARSELt, one torch._cslt_sparse_mm on the cached compressed w, then one transposing copy into y: what
    ``SparseLinear`` runs."""
    return cusparselt.linear(x, cusparselt.compressed(w))


@linear24.impl("cusparselt_fused_t", backend="eager", dtypes=LINEAR_DTYPES)
def linear24_cusparselt_fused_t(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """cuSPARSELt writing y row-major itself (transpose_result): no copy, but a slower kernel and a slow host
    path on the H100 (see cusparselt.linear)."""
    return cusparselt.linear(x, cusparselt.compressed(w), fuse_transpose=True)


@linear24.impl("cutlass", backend="eager", dtypes=LINEAR_DTYPES)
def linear24_cutlass(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """PyTorch's CUTLASS 2:4 kernels (to_sparse_semi_structured with _FORCE_CUTLASS), built for sm_8x only."""
    reason = cusparselt.cutlass_unavailable()
    if reason:
        raise BackendUnavailable(reason)
    return F.linear(x, cusparselt.semi_structured(w, cutlass=True))


@linear24.impl("cusparselt_planned", backend="eager", dtypes=LINEAR_DTYPES)
def linear24_cusparselt_planned(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """cuSPARSELt through ctypes, compressed w and plan cached: one cusparseLtMatmul and one tiled transpose."""
    return cusparselt_plan.linear(x, w)


@linear24.impl("cusparselt_planned_search", backend="eager", dtypes=LINEAR_DTYPES)
def linear24_cusparselt_planned_search(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """cusparselt_planned with the kernel chosen once per shape by cusparseLtMatmulSearch (it times them)."""
    return cusparselt_plan.linear(x, w, search=True)


@linear24.impl("cusparselt_planned_fused_t", backend="eager", dtypes=LINEAR_DTYPES)
def linear24_cusparselt_planned_fused_t(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """cusparselt_planned with cuSPARSELt writing y row-major (D column-major): no copy, maybe another kernel."""
    return cusparselt_plan.linear(x, w, fuse_transpose=True)


__all__ = ["SparseLinear", "linear24", "prune_rowwise", "prune_transposable", "sparsify24",
           "sparsify24_transposable"]


def __getattr__(name: str) -> Any:
    """``SparseLinear`` (module.py), imported on first use: the nn.Module is built on the ops above, so it imports
    this package."""
    if name == "SparseLinear":
        return importlib.import_module("kernelkit.ops.sparse24.module").SparseLinear
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
