"""What a kernel problem is: an op (reference, inputs, cost, tolerance) and its named impls.

A user writes::

    @kk.op(sizes=[(4096, 4096), (1823, 781)], dtypes=[torch.float32, torch.bfloat16])
    def square(x):                      # the reference: plain PyTorch, the spec
        return x * x

    @square.impl("triton_flat")         # the backend is read off the name's first word
    def square_triton_flat(x): ...

The backends an impl can name are the backend registry's (``registry.names()``), read without importing
any backend; a baseline (``compile``) comes from its backend, loaded by name when an op first asks.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelkit import registry
from kernelkit.errors import SpecError
from kernelkit.results import BASELINE_NAMES, SIZE_LABEL
from kernelkit.values import (  # noqa: F401 - spec's own names for the values, as before they had a module
    DTYPE_NAMES,
    TOLERANCES,
    Size,
    as_size,
    dtype_name,
    parse_dtype,
    parse_size,
    seeded_normal,
    to_dtype,
    to_size,
)

# The baselines every impl is compared with, each derived from the op's reference by the backend of the same name:
# eager, the reference as written (backends/eager.py), and compile, torch.compile of it (backends/compiled.py). An
# impl the op registers under one of these names replaces the derived one. A benchmark times both beside the
# impls and reports each impl's speedup over each.
# The matmul rates an op's FLOPs may be compared with (Op.compute_dtype; measure.ceilings measures each), and the
# 2:4-sparse rate, twice the case dtype's dense one (a 2:4 matmul's FLOPs are counted dense, 2MNK).
MATMUL_KINDS = ("fp32", "tf32", "bf16", "fp16", "fp8")
SPARSE24 = "sparse24"
COMPUTE_KINDS = (*MATMUL_KINDS, SPARSE24)
BASELINES = BASELINE_NAMES  # kept in results.py, which the light modules (reports, the CLI) import without torch
# The baselines an op lists among its impls (op.all_impls(), ``--impl compile`` in a check): the derived eager one
# is the reference itself, which a check would only compare with itself.
LISTED_BASELINES = ("compile",)

InputFactory = Callable[[Size, torch.dtype, torch.device, int], tuple[Any, ...]]
# shapes(*size) -> one shape per positional parameter of the reference, e.g. lambda M, N: ((M, N), (N,))
ShapesFn = Callable[..., Sequence[Sequence[int]]]
CostFn = Callable[..., int]


@dataclass(frozen=True)
class Impl:
    """One implementation of an op, bound to a backend.

    ``kernels`` are the kernels the impl launches. CUDA kernels (objects with ``compile()``) are compiled even
    where the impl cannot run (no GPU), so a build error is caught anyway; autotuned Triton kernels (or the
    cached builders that return them) have their chosen config recorded with each case.
    """

    name: str
    backend: str
    fn: Callable[..., Any]
    kernels: tuple[Any, ...] = ()
    dtypes: tuple[torch.dtype, ...] = ()  # empty: every dtype of the op
    description: str = ""


@dataclass(frozen=True)
class Backward:
    """How an op's gradient is computed by another op: ``op`` (e.g. gelu_backward) takes ``saved(*inputs,
    *outputs)`` followed by the first output's gradient, and returns the gradient of the first input, or a tuple of
    the gradients of the first inputs (attention: dq, dk, dv)."""

    op: Op
    saved: Callable[..., tuple[Any, ...]]


@dataclass
class Op:
    """A kernel problem: the reference (the spec), how to make inputs, what a call costs, how close is close."""

    name: str
    reference: Callable[..., Any]
    sizes: list[Size]
    dtypes: list[torch.dtype]
    cpu_sizes: list[Size]
    make_inputs: InputFactory
    bench_sizes: list[Size] = field(default_factory=list)  # the default sweep of `kernelkit bench` (GPU)
    bytes_fn: CostFn | None = None
    flops_fn: CostFn | None = None
    tolerance: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    impls: dict[str, Impl] = field(default_factory=dict)
    description: str = ""
    backward: Backward | None = None
    # The matmul rate a case's FLOPs compare with, when not the case dtype's own (COMPUTE_KINDS):
    # "fp8" for fp8 operands with a bfloat16 output dtype, "tf32" for float32 cases run on TF32 tensor cores,
    # "sparse24" for 2:4-sparse matmuls (twice the case dtype's dense rate).
    compute_dtype: str = ""
    # How a size is shown, when its numbers are not dimensions (a GPU MODE spec: "size=16 seed=4242"); None: 16x4242
    size_label: Callable[[Size], str] | None = None
    # (atol, rtol) for one input set, where the op's tolerance depends on the inputs (a GPU MODE task that scales
    # its tolerance with the input's size); None from it, or no function: ``tolerance`` by dtype
    tolerance_fn: Callable[[Sequence[Any]], tuple[float, float] | None] | None = None

    def size_text(self, size: Size) -> str:
        """A size of this op as people read it: '1823x781', or the op's own ``size_label``."""
        return self.size_label(tuple(size)) if self.size_label is not None else "x".join(map(str, size))

    def set_backward(self, op: Op, saved: Callable[..., tuple[Any, ...]]) -> None:
        """Declare ``op`` as this op's backward: ``kk.torch_op(self, impl)`` then runs ``op``'s impl of the same
        name for the gradient (else the reference's autograd). saved(*inputs, *outputs) -> its leading arguments."""
        self.backward = Backward(op, saved)

    @functools.cached_property
    def baselines(self) -> dict[str, Impl]:
        """Impls derived from the reference (``compile``), minus any the user registered under the same name.

        They run when named (``--impl compile``); built lazily because torch.compile is heavy to import.
        """
        derived = {name: registry.backend(name).baseline_impl(self) for name in LISTED_BASELINES
                   if name not in self.impls and name in registry.names()}
        return {name: impl for name, impl in derived.items() if impl is not None}

    def all_impls(self) -> dict[str, Impl]:
        """Registered impls, in order, then the baselines."""
        return {**self.impls, **self.baselines}

    def get_impl(self, name: str) -> Impl:
        """A registered impl or a baseline, by name; KeyError when neither."""
        return self.impls[name] if name in self.impls else self.baselines[name]

    def impl(
        self,
        name: str,
        backend: str | None = None,
        *,
        kernels: Sequence[Any] = (),
        dtypes: Sequence[torch.dtype] = (),
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the decorated function as impl ``name``; returns the function unchanged.

        The backend defaults to the name's first word (``triton_flat`` -> triton, ``cuda_2d`` -> cuda).
        kernels: the kernels the impl launches (CUDA kernels are compiled even where they cannot run, to catch
        build errors; autotuned Triton kernels get their chosen config recorded); dtypes: the dtypes it
        supports, when fewer than the op's (others are SKIPPED).
        An impl named ``compile`` replaces the op's torch.compile baseline of that name.
        """
        resolved = backend or _backend_from_name(name)
        if resolved not in registry.names():
            raise SpecError(f"impl {name!r} of op {self.name!r}: unknown backend {resolved!r}; use one of "
                            f"{registry.names()}")
        if name in self.impls:
            raise SpecError(f"op {self.name!r} already has an impl named {name!r}; give each impl its own name")

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            doc = inspect.getdoc(fn) or ""
            self.__dict__.pop("baselines", None)  # a registered `compile` replaces the derived one
            self.impls[name] = Impl(name, resolved, fn, tuple(kernels), tuple(dtypes), doc.split("\n")[0])
            return fn

        return register

    def sizes_for(self, device: str) -> list[Size]:
        return self.cpu_sizes if device == "cpu" else self.sizes

    def bench_sizes_for(self, device: str) -> list[Size]:
        return self.cpu_sizes if device == "cpu" else (self.bench_sizes or self.sizes)

    def tolerance_for(self, dtype: torch.dtype, inputs: Sequence[Any] | None = None) -> tuple[float, float]:
        """(atol, rtol) of a case in ``dtype``; with ``inputs``, the op's tolerance_fn's answer for them first."""
        if inputs is not None and self.tolerance_fn is not None:
            found = self.tolerance_fn(inputs)
            if found is not None:
                return found
        if dtype in self.tolerance:
            return self.tolerance[dtype]
        return TOLERANCES.get(dtype, (0.0, 0.0))

    def cost(self, inputs: Sequence[Any], outputs: Sequence[torch.Tensor]) -> tuple[int, int | None]:
        """(bytes, flops) of one call. Bytes default to reading every input and writing every output once, each
        storage once (an output that is a view of an input, or an input given twice, is one tensor of traffic)."""
        if self.bytes_fn is not None:
            nbytes = int(self.bytes_fn(*inputs))
        else:
            views: dict[tuple[str, int], int] = {}
            storage: dict[tuple[str, int], int] = {}
            for t in (*inputs, *outputs):
                if isinstance(t, torch.Tensor):
                    key = (str(t.device), t.untyped_storage().data_ptr() or id(t))  # no memory: its own key
                    views[key] = views.get(key, 0) + t.numel() * t.element_size()
                    storage[key] = t.untyped_storage().nbytes()
            nbytes = sum(min(n, storage[key]) for key, n in views.items())
        flops = int(self.flops_fn(*inputs)) if self.flops_fn is not None else None
        return nbytes, flops

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.reference(*args, **kwargs)


def size_labeller(ops: Sequence[Op]) -> Callable[[Any], Any]:
    """A function that writes, into a result of one of ``ops`` whose sizes have a label of their own, that label
    (details[results.SIZE_LABEL], read by results.size_text) and returns the result; others pass unchanged."""
    labelled = {op.name: op for op in ops if op.size_label is not None}

    def label(result: Any) -> Any:
        op = labelled.get(getattr(result, "op", ""))
        if op is not None and isinstance(getattr(result, "details", None), dict):
            result.details[SIZE_LABEL] = op.size_text(result.size)
        return result

    return label


def _backend_from_name(name: str) -> str:
    head = name.split("_")[0]
    if head in registry.names():
        return head
    raise SpecError(f"cannot tell the backend of impl {name!r}: start its name with one of {registry.names()} or "
                    "pass backend=")


def _tensor_params(reference: Callable[..., Any]) -> list[str]:
    """The reference's positional parameters without defaults: the ones kernelkit makes a tensor for."""
    return [
        p.name for p in inspect.signature(reference).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]


def _default_inputs(reference: Callable[..., Any], name: str) -> InputFactory:
    params = _tensor_params(reference)
    if not params:
        raise SpecError(f"reference {reference.__name__!r} takes no positional tensors; pass inputs= to kk.op")
    # Several parameters all get the case's full size, which fits elementwise ops only (rmsnorm's weight is N,
    # not M x N): say so once, where the outputs and warnings are shown, and name the fix.
    notice = (f"op {name!r}: each of its {len(params)} parameters ({', '.join(params)}) gets a tensor of the case's "
              f"full size (no shapes= or inputs= given); if their shapes differ, declare them, e.g. "
              f"shapes=lambda M, N: ((M, N), (N,))") if len(params) > 1 else ""

    def make(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[torch.Tensor, ...]:
        if notice:
            warnings.warn(notice, UserWarning, stacklevel=2)
        return tuple(seeded_normal(size, dtype, device, seed * 1009 + i) for i in range(len(params)))

    return make


def _shaped_inputs(shapes: ShapesFn, reference: Callable[..., Any], name: str) -> InputFactory:
    """inputs(size, ...) from ``shapes``: one seeded standard-normal tensor per shape it gives for the size."""
    params = _tensor_params(reference)

    def make(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[torch.Tensor, ...]:
        given = input_shapes(shapes, size, params, name)
        return tuple(seeded_normal(shape, dtype, device, seed * 1009 + i) for i, shape in enumerate(given))

    return make


def input_shapes(shapes: ShapesFn, size: Size, params: Sequence[str], name: str) -> list[Size]:
    """``shapes(*size)`` checked: one shape of non-negative ints per parameter in ``params``; SpecError otherwise."""
    where = f"op {name!r}: shapes{tuple(size)}"
    try:
        given = shapes(*size)
    except TypeError as exc:
        raise SpecError(f"{where} failed ({exc}): shapes= takes one argument per dimension of the case's size "
                        f"({len(size)} here), e.g. shapes=lambda M, N: ((M, N), (N,))") from None
    try:
        out = [as_size(shape) for shape in given]
    except (SpecError, TypeError):
        raise SpecError(f"{where} gave {given!r}: return one shape (a tuple of ints) per parameter") from None
    if len(out) != len(params):
        raise SpecError(f"{where} gave {len(out)} shapes for {len(params)} parameters ({', '.join(params)}); give "
                        f"one shape per parameter, in order")
    return out


def op(
    reference: Callable[..., Any] | None = None,
    *,
    sizes: Sequence[Size],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    cpu_sizes: Sequence[Size] | None = None,
    inputs: InputFactory | None = None,
    shapes: ShapesFn | None = None,
    bytes: CostFn | None = None,  # noqa: A002 - reads naturally at the call site: bytes=lambda x: ...
    flops: CostFn | None = None,
    tolerance: dict[torch.dtype, tuple[float, float]] | None = None,
    name: str | None = None,
    bench_sizes: Sequence[Size] | None = None,
    compute_dtype: str = "",
) -> Any:
    """Declare an op: decorate its reference (plain PyTorch, the spec).

    sizes: shapes for GPU runs; cpu_sizes: small shapes for CPU runs (interpreters and simulators are slow),
    by default each size's dimensions capped at 64. inputs(size, dtype, device, seed) -> tuple of arguments;
    by default one seeded standard-normal tensor of ``size`` per positional parameter of the reference.
    shapes(*size) -> one shape per parameter: the tensors' shapes when they differ from the case's size, e.g.
    ``shapes=lambda M, N: ((M, N), (N,))`` for rmsnorm(x, w); seeded standard-normal tensors like the default.
    bytes/flops(*inputs) -> int: the cost of one call, for bandwidth and throughput figures.
    bench_sizes: the sizes ``kernelkit bench`` sweeps on a GPU (default: ``sizes``); on the CPU it uses cpu_sizes.
    compute_dtype: the matmul rate the FLOPs compare with when not the case dtype's ('fp8', 'tf32', ...).
    """

    def build(fn: Callable[..., Any]) -> Op:
        if not sizes:
            raise SpecError(f"op {fn.__name__!r} needs at least one size")
        if compute_dtype and compute_dtype not in COMPUTE_KINDS:
            raise SpecError(f"op {fn.__name__!r}: compute_dtype {compute_dtype!r} is not one of {COMPUTE_KINDS}")
        gpu_sizes = [as_size(s) for s in sizes]
        small = [as_size(s) for s in cpu_sizes] if cpu_sizes else _shrink(gpu_sizes)
        doc = inspect.getdoc(fn) or ""
        op_name = name or fn.__name__
        if inputs is not None and shapes is not None:
            raise SpecError(f"op {op_name!r}: give inputs= or shapes=, not both (inputs= makes the tensors itself)")
        if shapes is not None:
            params = _tensor_params(fn)
            for size in dict.fromkeys([*gpu_sizes, *small]):  # a wrong shapes= fails here, not in every case
                input_shapes(shapes, size, params, op_name)
        return Op(
            name=op_name,
            reference=fn,
            sizes=gpu_sizes,
            dtypes=list(dtypes),
            cpu_sizes=small,
            make_inputs=inputs or (_shaped_inputs(shapes, fn, op_name) if shapes else _default_inputs(fn, op_name)),
            bench_sizes=[as_size(s) for s in bench_sizes] if bench_sizes else gpu_sizes,
            bytes_fn=bytes,
            flops_fn=flops,
            tolerance=dict(tolerance or {}),
            description=doc.split("\n")[0],
            compute_dtype=compute_dtype,
        )

    return build(reference) if reference is not None else build


def _shrink(sizes: list[Size]) -> list[Size]:
    small: list[Size] = []
    for size in sizes:
        capped = tuple(min(d, 64) for d in size)
        if capped not in small:
            small.append(capped)
    return small


@dataclass
class CaseSetup:
    """An impl of an op at one size and dtype on one device, with its inputs made (target.prepare_case makes one)."""

    op: Op
    impl: Impl
    size: Size
    dtype: torch.dtype
    device: str
    inputs: tuple[Any, ...]
    source: str = ""  # where the op is defined (a module name or a .py path), to load it again in another process

    @property
    def label(self) -> str:
        """'square/triton_flat/4096x4096/float32': names the case in tables, traces and NVTX ranges."""
        return f"{self.op.name}/{self.impl.name}/{'x'.join(map(str, self.size))}/{dtype_name(self.dtype)}"

    def call(self) -> Any:
        """One call of the impl on the case's inputs."""
        return self.impl.fn(*self.inputs)


@dataclass(frozen=True)
class Case:
    """One unit of work: an impl of an op at one size, dtype and seed. Plain data, so it can cross processes."""

    source: str  # where the op is defined: a module name (kernelkit.ops.square) or a file path
    op: str
    impl: str
    size: Size
    dtype: str
    seed: int
