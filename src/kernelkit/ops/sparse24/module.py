"""SparseLinear: a drop-in for nn.Linear with a 2:4-sparse weight, for inference and for training.

- Inference (``mode="inference"``): the weight is pruned once (row-wise 2:4 mask, sparsify24) and compressed
  once; each forward is one cuSPARSELt matmul writing y row-major. The weight's memory shrinks to 9/16. Forward
  only: nothing in this mode has a gradient.
- Training (``mode="training"``): the dense weight stays the trained parameter. Each forward prunes it with the
  transposable mask (one Triton pass writing the pruned W and W^T), compresses both (compress.py: one Triton
  pass each in cuSPARSELt's layout on Hopper, the library's compression elsewhere), and runs y = x W~^T on
  cuSPARSELt; the backward runs dx = dy W~ on cuSPARSELt from W~^T's compressed form, and dW = dy^T x dense.
  The gradient of the pruned weight reaches the dense weight unmasked (the straight-through estimator of 2:4
  training). Each cuSPARSELt matmul is ``sparse_matmul``: its plan made once per shape where libcusparseLt loads
  (cusparselt_plan.py), so a step pays no per-call set-up. Memory grows by the compressed forms (9/8 of W while
  both exist; W~^T's 9/16 is kept for the backward); scripts/gpu-sparse24 measures it rather than assuming it.

Backends: ``"cusparselt"`` (CUDA) or ``"dense"`` (any device: the same pruning with dense matmuls, the CPU path
and the reference of the sparse one); by default cuSPARSELt where the weight is on a GPU that has it.

torch.compile: every kernel call goes through a ``kernelkit_sparse24::`` torch.library operator with a fake
impl, so a model using SparseLinear compiles with ``fullgraph=True``; dynamo traces the autograd.Function
around them. Why not the backward as a kernelkit op: its inputs (saved compressed W^T) exist only inside a
training step, in cuSPARSELt's layout; as a function it is tested on the GPU against the dense path instead.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from kernelkit.errors import BackendUnavailable
from kernelkit.ops.sparse24 import compress as compression
from kernelkit.ops.sparse24 import cusparselt

MODES = ("inference", "training")
BACKENDS = ("cusparselt", "dense")


def prune_rowwise(w: torch.Tensor) -> torch.Tensor:
    """sparsify24 of w: the Triton kernel on a GPU, the reference elsewhere (it is plain PyTorch)."""
    from kernelkit.ops import sparse24

    return sparse24.prune_rowwise(w) if w.is_cuda else sparse24.sparsify24(w)


def prune_transposable_pair(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pruned w, pruned w.T contiguous) with the transposable mask: one Triton pass on a GPU."""
    from kernelkit.ops import sparse24

    if w.is_cuda:
        return sparse24.prune_transposable(w, transposed=True)
    pruned = sparse24.sparsify24_transposable(w)
    return pruned, pruned.t().contiguous()


@functools.cache
def define_operators() -> None:
    """Define the kernelkit_sparse24:: operators SparseLinear calls (once per process, on first use, never
    while torch.compile traces: SparseLinear's constructor calls this; the forward reads torch.ops)."""
    lib = "kernelkit_sparse24"

    def transposable(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return prune_transposable_pair(w)

    def compress(w: torch.Tensor) -> torch.Tensor:
        return compression.compress(w)

    def sparse_linear(x: torch.Tensor, packed: torch.Tensor, out_features: int, bias: torch.Tensor | None
                      ) -> torch.Tensor:
        return sparse_matmul(x, packed, out_features, bias)

    defined = torch.library.custom_op(f"{lib}::prune_transposable", transposable, mutates_args=(),
                                      schema="(Tensor w) -> (Tensor, Tensor)")
    defined.register_fake(lambda w: (torch.empty_like(w), w.new_empty((w.shape[1], w.shape[0]))))
    defined = torch.library.custom_op(f"{lib}::compress", compress, mutates_args=(), schema="(Tensor w) -> Tensor")
    defined.register_fake(lambda w: w.new_empty(cusparselt.compressed_shape(w)))
    defined = torch.library.custom_op(f"{lib}::sparse_linear", sparse_linear, mutates_args=(),
                                      schema="(Tensor x, Tensor packed, SymInt out_features, Tensor? bias) -> Tensor")
    defined.register_fake(lambda x, packed, out_features, bias: x.new_empty((x.shape[0], out_features)))


def sparse_matmul(x: torch.Tensor, packed: torch.Tensor, out_features: int, bias: torch.Tensor | None
                  ) -> torch.Tensor:
    """y = x @ W~^T + bias from W~'s compressed form (torch._cslt_compress's bytes): cuSPARSELt with its plan
    made once per shape (cusparselt_plan.py: no per-call set-up) where libcusparseLt loads, else
    torch._cslt_sparse_mm, which builds the plan at every call (~1 ms of host time; twice a training step)."""
    from kernelkit.ops.sparse24 import cusparselt_plan

    try:
        y = cusparselt_plan.linear_compressed(x, packed, out_features)  # checks where it can run, once
    except BackendUnavailable:
        return cusparselt.linear(x, packed, bias)
    return y if bias is None else y.add_(bias)  # torch's call adds it in the epilogue; here one more pass over y


def operators() -> Any:
    """torch.ops.kernelkit_sparse24: prune_transposable, compress, sparse_linear (define_operators first)."""
    return torch.ops.kernelkit_sparse24


# The operators' own functions, called directly in eager mode: torch.library's dispatch costs host time at every
# call, and a training step's first kernels are short, so in a cold step the GPU waited on it (an H200's step at
# 8192x11008x4096 spent 1708 us of host time with it, 1648 without). torch.compile traces the operators (``calls``).
EAGER = SimpleNamespace(prune_transposable=prune_transposable_pair, compress=compression.compress,
                        sparse_linear=sparse_matmul)


def calls() -> Any:
    """What SparseLinear calls: the operators while torch.compile traces, their functions otherwise."""
    return operators() if torch.compiler.is_compiling() else EAGER


class _TrainingLinear(torch.autograd.Function):
    """y = x W~^T with W~ the transposable 2:4 pruning of W, recomputed each call; x is 2-D (M, K)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                use_cusparselt: bool) -> torch.Tensor:
        ops = calls()
        pruned, pruned_t = ops.prune_transposable(weight)
        if use_cusparselt:
            y = ops.sparse_linear(x, ops.compress(pruned), weight.shape[0], bias)
            saved = ops.compress(pruned_t)  # W~^T (K, N) compressed: the backward's sparse operand
        else:
            y = F.linear(x, pruned, bias)
            saved = pruned
        ctx.save_for_backward(x, saved)
        ctx.use_cusparselt = use_cusparselt
        ctx.in_features = weight.shape[1]
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, saved = ctx.saved_tensors
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            # dx = dy W~: on cuSPARSELt as (W~^T dy^T)^T, which sparse_linear writes row-major.
            dx = (calls().sparse_linear(dy, saved, ctx.in_features, None) if ctx.use_cusparselt
                  else dy @ saved)
        if ctx.needs_input_grad[1]:
            dw = dy.t() @ x  # dense: every element of W gets a gradient (straight-through)
        if ctx.needs_input_grad[2]:
            db = dy.sum(0)
        return dx, dw, db, None


class SparseLinear(nn.Module):
    """nn.Linear with a 2:4-sparse weight. x (..., in_features) -> y (..., out_features); fp16/bf16 on cuSPARSELt.

    Build one from a trained layer with ``SparseLinear.from_linear(linear, mode="inference")``, or train one
    from scratch with ``SparseLinear(in_features, out_features, mode="training")``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, mode: str = "training",
                 backend: str | None = None, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        dense = nn.Linear(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.in_features, self.out_features, self.mode = in_features, out_features, mode
        self.backend = backend or default_backend(dense.weight)
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        self.bias = dense.bias
        define_operators()
        self._set_weight(dense.weight.detach())

    @classmethod
    def from_linear(cls, linear: nn.Linear, mode: str = "inference", backend: str | None = None) -> SparseLinear:
        """A SparseLinear with ``linear``'s weight (pruned once for inference; kept dense for training) and bias."""
        w = linear.weight
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, mode=mode,
                    backend=backend or default_backend(w), device="meta", dtype=w.dtype)
        layer.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())
        layer._set_weight(w.detach())
        return layer

    def _set_weight(self, w: torch.Tensor) -> None:
        if self.mode == "training":
            self.weight = nn.Parameter(w.clone())
            return
        if self.bias is not None:  # inference is forward-only: the cuSPARSELt operator has no gradient
            self.bias.requires_grad_(False)
        if w.is_meta:  # from_linear builds on the meta device first, then sets the real weight
            return
        pruned = prune_rowwise(w.contiguous())
        if self.backend == "cusparselt":
            self.register_buffer("packed", cusparselt.compress(pruned))  # 9/16 of the dense weight
            self.weight = None
        else:
            self.register_buffer("weight", pruned)

    def weight_bytes(self) -> int:
        """Bytes this layer holds for its weight: dense (training), compressed or pruned dense (inference)."""
        held = [t for t in (getattr(self, "packed", None), self.weight) if isinstance(t, torch.Tensor)]
        return sum(t.numel() * t.element_size() for t in held)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        use_cusparselt = self.backend == "cusparselt"
        if self.mode == "training":
            y = _TrainingLinear.apply(rows, self.weight, self.bias, use_cusparselt)
        elif use_cusparselt:
            y = calls().sparse_linear(rows, self.packed, self.out_features, self.bias)
        else:
            y = F.linear(rows, self.weight, self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"mode={self.mode}, backend={self.backend}")


def default_backend(weight: torch.Tensor) -> str:
    """cuSPARSELt for a 16-bit weight on a GPU that has it; the dense path otherwise."""
    usable = weight.is_cuda and weight.dtype in (torch.float16, torch.bfloat16)
    return "cusparselt" if usable and torch.backends.cusparselt.is_available() else "dense"
