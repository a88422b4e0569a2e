"""Any impl as a PyTorch operator: ``torch_op(square, "eager")`` returns ``torch.ops.kernelkit.square_eager``.

The operator is a ``torch.library.custom_op``: one opaque node to torch.compile, so a model calling it compiles
with ``fullgraph=True`` and no graph break. Everything it needs comes from the op:

- the schema, from the reference's signature: a parameter with no default and no annotation is a ``Tensor``;
  others are ``Tensor``, ``Tensor?``, ``int`` (``SymInt``), ``float``, ``bool`` or ``str``, read from the
  annotation or else the default's type (``None`` means an optional tensor). The return is ``Tensor`` or a
  fixed tuple of tensors, from the return annotation or else by running the reference once on a small CPU case;
- the fake (meta) impl: the reference run on FakeTensors gives each output's shape, dtype and device, so output
  shapes must follow from input shapes and non-tensor arguments (no data-dependent shapes);
- the gradient: when the op declares a backward op (``op.set_backward``) that has an impl of the same name, that
  impl (gelu's triton_flat -> gelu_backward's triton_flat); otherwise the reference's own (its vjp at the saved
  inputs).

Outputs are contiguous and never alias an input: a non-contiguous or aliasing impl output is copied, because the
fake impl promises fresh contiguous tensors and inductor plans memory around that promise. The schema declares
no mutated inputs; ``kernelkit check`` flags an impl that mutates one (INPUT_MUTATED).
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelkit.errors import SpecError
from kernelkit.spec import LISTED_BASELINES, Backward, Impl, Op
from kernelkit.target import open_target

NAMESPACE = "kernelkit"
_SCALAR_TYPES: dict[type, str] = {bool: "bool", int: "SymInt", float: "float", str: "str"}


@dataclass(frozen=True)
class _Made:
    """What a kernelkit:: operator was made from, to make registering it again return it."""

    op: str
    impl: str
    definition: Any  # the CustomOpDef; torch keeps it too, this keeps the record readable


# kernelkit:: operators made in this process, by name. Mirrors torch's own global operator registry.
_made: dict[str, _Made] = {}


def torch_op(op: Op | str, impl: str, *, name: str | None = None) -> torch._ops.OpOverloadPacket:
    """Make impl ``impl`` of ``op`` a PyTorch operator and return it: ``torch.ops.kernelkit.<name>``.

    op: an Op, or a built-in op name / .py file of one op (imported in this process as it is). name: default
    ``<op>_<impl>``. Calling it again with the same op and impl names returns the operator already made (which
    keeps the impl it was made from, even if the op's file was loaded again); a name taken by anything else is a
    SpecError. The operator takes the reference's arguments and returns tensors of the reference's shapes and
    dtypes, e.g. square: (any shape) float -> same shape and dtype.
    """
    spec = op if isinstance(op, Op) else open_target(op).op()
    chosen = _impl(spec, impl)
    opname = name or f"{spec.name}_{impl}"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", opname):
        raise SpecError(f"operator name {opname!r} is not an identifier; pass name= with letters, digits and _")
    qualname = f"{NAMESPACE}::{opname}"
    made = _made.get(opname)
    if made is not None:
        if (made.op, made.impl) == (spec.name, impl):
            return getattr(torch.ops.kernelkit, opname)
        raise SpecError(f"{qualname} is already impl {made.impl!r} of op {made.op!r}; pass name= to pick another")
    if hasattr(torch.ops.kernelkit, opname):
        raise SpecError(f"{qualname} is already defined outside kernelkit.torch_op; pass name= to pick another")

    signature = _Signature.of(spec)
    definition = torch.library.custom_op(
        qualname, _kernel(chosen, signature), mutates_args=(), schema=signature.schema
    )
    definition.register_fake(_fake(spec, signature))
    if spec.backward is not None and impl in spec.backward.op.impls:
        # The backward impl as an operator of its own (with its fake impl): AOTAutograd traces backward formulas
        # under torch.compile, and a raw kernel launch cannot run on FakeTensors.
        backward_operator = torch_op(spec.backward.op, impl)
        backward, setup_context = _kernel_gradient(spec.backward, backward_operator)
    else:
        backward, setup_context = _reference_gradient(spec, signature)
    definition.register_autograd(backward, setup_context=setup_context)
    _made[opname] = _Made(spec.name, impl, definition)
    return getattr(torch.ops.kernelkit, opname)


def schema_of(op: Op) -> str:
    """'(Tensor x, float alpha=1.0) -> Tensor': the torch.library schema read off ``op``'s reference."""
    return _Signature.of(op).schema


def _impl(op: Op, name: str) -> Impl:
    if name in LISTED_BASELINES and name not in op.impls:
        raise SpecError(
            f"{name!r} is torch.compile of the reference itself: call the reference in your model and compile the "
            "model; torch_op wraps a kernel impl"
        )
    if name not in op.impls:
        known = ", ".join(op.impls) or "none"
        raise SpecError(f"op {op.name!r} has no impl {name!r}; its impls: {known}")
    return op.get_impl(name)


@dataclass(frozen=True)
class _Signature:
    """The reference's parameters as the operator sees them, and its outputs."""

    schema: str
    keyword_only: frozenset[str]
    names: tuple[str, ...]  # every parameter, in schema order
    n_outputs: int | None  # None: one tensor; n: a tuple of n tensors

    @classmethod
    def of(cls, op: Op) -> _Signature:
        params = list(inspect.signature(op.reference).parameters.values())
        hints = _type_hints(op.reference)
        args: list[str] = []
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise SpecError(f"op {op.name!r}: an operator needs a fixed signature, but the reference takes "
                                f"{'*' if p.kind is p.VAR_POSITIONAL else '**'}{p.name}")
            if p.kind is p.KEYWORD_ONLY and "*" not in args:
                args.append("*")
            args.append(_argument(op.name, p, hints.get(p.name)))
        n_outputs = _outputs(op, hints.get("return"))
        returns = "Tensor" if n_outputs is None else f"({', '.join(['Tensor'] * n_outputs)})"
        return cls(
            schema=f"({', '.join(args)}) -> {returns}",
            keyword_only=frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY),
            names=tuple(p.name for p in params),
            n_outputs=n_outputs,
        )

    def call(self, fn: Callable[..., Any], values: Sequence[Any]) -> Any:
        """Call ``fn`` with ``values`` given in schema order, keyword-only ones by keyword."""
        pairs = list(zip(self.names, values, strict=True))
        args = [v for n, v in pairs if n not in self.keyword_only]
        kwargs = {n: v for n, v in pairs if n in self.keyword_only}
        return fn(*args, **kwargs)

    def as_tuple(self, out: Any, what: str) -> tuple[Any, ...]:
        outs = (out,) if self.n_outputs is None else tuple(out) if isinstance(out, (tuple, list)) else (out,)
        expected = 1 if self.n_outputs is None else self.n_outputs
        if len(outs) != expected or not all(isinstance(o, torch.Tensor) for o in outs):
            raise TypeError(f"{what} returned {_describe(out)}; the operator's schema says {expected} tensor(s)")
        return outs

    def from_tuple(self, outs: Sequence[torch.Tensor]) -> Any:
        return outs[0] if self.n_outputs is None else tuple(outs)


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Resolved annotations; string annotations that cannot be resolved are left out (read as unannotated)."""
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an unresolvable annotation falls back to defaults, as documented
        return {k: v for k, v in getattr(fn, "__annotations__", {}).items() if not isinstance(v, str)}


def _argument(op_name: str, p: inspect.Parameter, hint: Any) -> str:
    kind = _schema_type(hint, p.default)
    if kind is None:
        shown = hint if hint is not None else type(p.default).__name__
        raise SpecError(f"op {op_name!r}: parameter {p.name!r} ({shown}) has no operator type; use a tensor, "
                        "int, float, bool, str or an optional tensor (default None)")
    default = "" if p.default is p.empty else f"={_literal(p.default)}"
    return f"{kind} {p.name}{default}"


def _schema_type(hint: Any, default: Any) -> str | None:
    if hint is None:
        if default is inspect.Parameter.empty:
            return "Tensor"
        return "Tensor?" if default is None else _SCALAR_TYPES.get(type(default))
    if hint is torch.Tensor:
        return "Tensor"
    if hint in _SCALAR_TYPES:
        return _SCALAR_TYPES[hint]
    members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
    if len(members) == 2 and type(None) in members:
        inner = _schema_type(next(m for m in members if m is not type(None)), inspect.Parameter.empty)
        return f"{inner}?" if inner else None
    return None


def _literal(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _outputs(op: Op, hint: Any) -> int | None:
    """None for one tensor, n for a tuple of n tensors: from the return annotation, else one small CPU call."""
    if hint is torch.Tensor:
        return None
    members = typing.get_args(hint) if typing.get_origin(hint) is tuple else ()
    if members and Ellipsis not in members and all(m is torch.Tensor for m in members):
        return len(members)
    inputs = op.make_inputs(op.cpu_sizes[0], op.dtypes[0], torch.device("cpu"), 0)
    out = op.reference(*inputs)
    if isinstance(out, torch.Tensor):
        return None
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return len(out)
    raise SpecError(f"op {op.name!r}: the reference returns {_describe(out)}; an operator returns a tensor or a "
                    "tuple of tensors")


def _describe(out: Any) -> str:
    if isinstance(out, (tuple, list)):
        return f"a {type(out).__name__} of {len(out)} ({', '.join(type(o).__name__ for o in out)})"
    return f"a {type(out).__name__}"


def _kernel(impl: Impl, signature: _Signature) -> Callable[..., Any]:
    """The operator's real computation: the impl, with its outputs made fresh and contiguous."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        out = impl.fn(*args, **kwargs)
        outs = signature.as_tuple(out, f"impl {impl.name!r}")
        taken = [a.untyped_storage().data_ptr() for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        fresh = []
        for o in outs:
            ptr = o.untyped_storage().data_ptr()
            o = o.clone(memory_format=torch.contiguous_format) if ptr and ptr in taken else o.contiguous()
            taken.append(o.untyped_storage().data_ptr())
            fresh.append(o)
        return signature.from_tuple(fresh)

    kernel.__name__ = impl.fn.__name__
    return kernel


def _fake(op: Op, signature: _Signature) -> Callable[..., Any]:
    """Output metadata without running a kernel: the reference on FakeTensors, as fresh contiguous tensors."""

    def fake(*args: Any, **kwargs: Any) -> Any:
        outs = signature.as_tuple(op.reference(*args, **kwargs), f"reference of {op.name!r}")
        return signature.from_tuple([torch.empty(o.shape, dtype=o.dtype, device=o.device) for o in outs])

    return fake


def _reference_gradient(op: Op, signature: _Signature) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(backward, setup_context) for register_autograd: the reference's vjp at the saved inputs.

    Gradients flow to floating-point positional tensors; torch.library passes keyword-only arguments outside
    autograd, so they get none.
    """

    def setup_context(
        ctx: Any, inputs: tuple[Any, ...], output: Any, keyword_only_inputs: dict[str, Any] | None = None
    ) -> None:
        values = [*inputs, *(keyword_only_inputs or {}).values()]
        ctx.save_for_backward(*[v for v in values if isinstance(v, torch.Tensor)])
        ctx.others = [_SAVED if isinstance(v, torch.Tensor) else v for v in values]
        ctx.n_positional = len(inputs)

    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = iter(ctx.saved_tensors)
        values = [next(saved) if v is _SAVED else v for v in ctx.others]
        wrt = [i for i, v in enumerate(values[: ctx.n_positional])
               if isinstance(v, torch.Tensor) and v.dtype.is_floating_point]

        def reference_at(*primals: torch.Tensor) -> Any:
            full = list(values)
            for i, primal in zip(wrt, primals, strict=True):
                full[i] = primal
            return signature.call(op.reference, full)

        _, vjp = torch.func.vjp(reference_at, *[values[i] for i in wrt])
        cotangents = vjp(grads[0] if signature.n_outputs is None else tuple(grads))
        result: list[torch.Tensor | None] = [None] * ctx.n_positional
        for i, grad in zip(wrt, cotangents, strict=True):
            result[i] = grad
        return tuple(result)

    return backward, setup_context


def _kernel_gradient(spec: Backward, operator: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(backward, setup_context) running the backward op's impl as an operator on ``spec.saved(*inputs,
    *outputs)`` and the first output's gradient. It returns the first input's gradient, or a tuple: the gradients
    of the first len(tuple) inputs (attention: dq, dk, dv); the other inputs get none. Outputs after the first
    are statistics saved for the backward (attention's lse): no gradient flows from them."""

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        outputs = tuple(output) if isinstance(output, (tuple, list)) else (output,)
        values = (*inputs, *outputs)
        ctx.save_for_backward(*[v for v in values if isinstance(v, torch.Tensor)])
        ctx.layout = [_SAVED if isinstance(v, torch.Tensor) else v for v in values]
        ctx.n_inputs = len(inputs)

    def backward(ctx: Any, grad: torch.Tensor, *_statistics_grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = iter(ctx.saved_tensors)
        values = [next(saved) if v is _SAVED else v for v in ctx.layout]
        grads = operator(*spec.saved(*values), grad.contiguous())
        grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
        return (*grads, *([None] * (ctx.n_inputs - len(grads))))

    return backward, setup_context


_SAVED = object()  # marks where a tensor input sits among the saved non-tensor arguments
