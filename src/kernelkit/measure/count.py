"""FLOPs of one call counted from the reference itself, for an op that declares none (a KernelBench problem, a GPU
MODE task, a ``kk.op`` without ``flops=``); bytes stay the op's own model (spec.Op.cost: every input read and every
output written once, each storage once).

The count is torch.utils.flop_counter's (FlopCounterMode's formulas) around one call of the reference:
1. on meta copies of the inputs: the counter reads shapes only, so this costs no memory and no device time (a
   KernelBench model is built on the meta device for it, see formats/kernelbench.py);
2. else (a reference that reads its data: ``.item()``, a data-dependent shape, a tensor made on a named device) on
   copies of the inputs themselves, on the case's device, once per input signature and process;
3. else no FLOPs (a warning says why): the case keeps its bytes, and so a memory-bound place on the roofline.
FlopCounterMode counts matmuls, convolutions and attention (2 FLOPs a multiply-add); elementwise ops and
reductions count 0, so an elementwise reference stays memory-bound by its bytes alone.
Measured on a 2-core CPU over KernelBench levels 1-3 (250 problems): meta counts all but 2 (Swin models call
``.item()``), in ~1-5 ms a level-1 or level-2 problem, seconds for a level-3 LSTM or GRU (PyTorch's Python meta
kernels, step by step); the first meta count of a process imports torch._dynamo through those kernels (~1-2 s).
On the inputs themselves a fused kernel the counter has no formula for counts nothing (a level-3 LSTM on the CPU:
51 kFLOP, its final Linear, against 31 GFLOP on meta; scripts/gpu-cost measures a GPU), and the reference runs
once more, on copies of its inputs.

Which matmul rate the FLOPs compare with (the op's ``compute_dtype``, see ``compute_kind``): the rate of the
dominant floating dtype of the inputs (by bytes); float32 compares with the TF32 rate only where PyTorch runs that
work on TF32 tensor cores: convolutions while ``torch.backends.cudnn.allow_tf32`` (on by default), matmuls while
``torch.backends.cuda.matmul.allow_tf32`` (off by default).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelkit.errors import describe_exception
from kernelkit.spec import Op
from kernelkit.verify import fresh_copies

# FLOP-carrying aten ops that cuDNN runs (TF32 under torch.backends.cudnn.allow_tf32); the others that the counter
# knows are matmuls (mm, bmm, addmm, baddbmm) and attention (bf16/fp16 kernels: no fp32 TF32 question).
_CUDNN_OPS = ("convolution", "_convolution", "cudnn_convolution", "convolution_backward")
_KINDS = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8",
          torch.float8_e5m2: "fp8"}


@dataclass(frozen=True)
class Count:
    """One call's FLOPs, the matmul rate they compare with ('fp32', 'tf32', 'bf16', ...; '' when the inputs hold
    no dtype with a rate) and where they were counted ('meta' or the device's type)."""

    flops: int
    kind: str
    where: str


def count(fn: Callable[..., Any], inputs: Sequence[Any]) -> Count:
    """FLOPs of ``fn(*inputs)`` by FlopCounterMode, on meta copies first, else on copies of the inputs.

    Raises the real call's exception when neither can run (the meta call's is lost: a meta failure only means
    the reference reads its data).
    """
    try:
        flops, by_op = _counted(fn, _to_meta(inputs))
        where = "meta"
    except Exception:  # noqa: BLE001 - any failure on meta: count on the real inputs instead
        flops, by_op = _counted(fn, fresh_copies(inputs))
        where = _device_type(inputs)
    return Count(flops, compute_kind(dominant_dtype(inputs), by_op), where)


def _counted(fn: Callable[..., Any], inputs: Sequence[Any]) -> tuple[int, dict[str, int]]:
    counter = _FlopCounter()
    with counter, torch.no_grad():
        fn(*inputs)
    return sum(counter.by_op.values()), counter.by_op


class _FlopCounter(TorchDispatchMode):
    """FlopCounterMode's count (its formulas, flop_registry, and its decomposing of an op it has none for into
    ops it has) without its per-module tracking and its mode's dynamo guard, which import torch._dynamo (1-2 s
    the first time in a process): a matmul or convolution reference counts on meta without it."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: dict[str, int] = {}

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # A count never runs under torch.compile: no need for the wrapper that imports torch._dynamo (the 1-2 s)
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.utils.flop_counter import flop_registry

        kwargs = kwargs or {}
        packet = func._overloadpacket
        if packet not in flop_registry and func is not torch.ops.prim.device.default:
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        if packet in flop_registry:
            name = packet.__name__
            self.by_op[name] = self.by_op.get(name, 0) + int(flop_registry[packet](*args, **kwargs, out_val=out))
        return out


def compute_kind(dtype: torch.dtype | None, by_op: dict[str, int]) -> str:
    """The matmul rate FLOPs of ``dtype`` compare with, given how they split over aten ops ({'mm': n, ...}).

    float32 work runs on TF32 tensor cores where PyTorch's flag for it is on: 'tf32' when most FLOPs are
    convolutions and cudnn.allow_tf32 is on, or matmuls and cuda.matmul.allow_tf32 is on; else 'fp32'.
    """
    if dtype is None or dtype not in _KINDS:
        return ""
    if dtype != torch.float32:
        return _KINDS[dtype]
    total = sum(by_op.values())
    conv = sum(n for name, n in by_op.items() if name in _CUDNN_OPS)
    if total and conv * 2 >= total:
        return "tf32" if torch.backends.cudnn.allow_tf32 else "fp32"
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"


def dominant_dtype(inputs: Sequence[Any]) -> torch.dtype | None:
    """The floating dtype holding the most bytes among the (nested) tensor inputs; None when there is none."""
    held: dict[torch.dtype, int] = {}
    for t in _tensors(inputs):
        if t.is_floating_point():
            held[t.dtype] = held.get(t.dtype, 0) + t.numel() * t.element_size()
    return max(held, key=lambda d: held[d]) if held else None


class CountedFlops:
    """An op's ``flops_fn`` that counts its reference (see ``count``), once per input signature.

    Each count also sets the op's ``compute_dtype`` to the kind it found (the matmul rate the case's FLOPs compare
    with), so the ceilings read right after the cost in the same job match the case just counted; an op built
    with a compute_dtype of its own keeps it (see ``counted``).
    """

    def __init__(self, op: Op) -> None:
        self.op = op
        self.declared_kind = op.compute_dtype
        self._seen: dict[Hashable, Count | None] = {}

    def __call__(self, *inputs: Any) -> int:
        key = _signature(inputs)
        if key not in self._seen:
            try:
                self._seen[key] = count(self.op.reference, inputs)
            except Exception as exc:  # noqa: BLE001 - the case keeps its bytes; the warning says why no FLOPs
                warnings.warn(f"{self.op.name}: FLOPs not counted, the reference did not run under "
                              f"FlopCounterMode: {describe_exception(exc)}", UserWarning, stacklevel=2)
                self._seen[key] = None
        found = self._seen[key]
        if not self.declared_kind:
            self.op.compute_dtype = found.kind if found is not None and found.flops else ""
        return found.flops if found is not None else 0


def settle_kind(op: Op, inputs: Sequence[Any]) -> str:
    """``op``'s compute_dtype for a case on ``inputs``, set as CountedFlops sets it when it counts (a process that
    times the case without computing its cost, strict mode's timing worker, calls this first); an op that
    declares its FLOPs or its compute_dtype keeps its own."""
    if isinstance(op.flops_fn, CountedFlops):
        op.flops_fn(*inputs)
    return op.compute_dtype


def counted(op: Op) -> Op:
    """``op`` with FLOPs counted from its reference when it declares none (its flops_fn, else CountedFlops)."""
    if op.flops_fn is None:
        op.flops_fn = CountedFlops(op)
    return op


def _to_meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, (tuple, list)):
        return type(value)(_to_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_meta(v) for k, v in value.items()}
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _device_type(inputs: Sequence[Any]) -> str:
    tensors = _tensors(inputs)
    return tensors[0].device.type if tensors else "cpu"


def _signature(value: Any) -> Hashable:
    """What the count depends on: each tensor's shape, dtype and device type; other values as themselves."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.device.type)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(_signature(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *((k, _signature(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return ("unhashable", type(value).__name__, id(value))
    return value
