"""kernelkit.torch_op: any impl as a torch.library custom op that works in models and under torch.compile."""

import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kernelkit as kk
from kernelkit.errors import SpecError
from kernelkit.target import load
from kernelkit.torch_ops import schema_of

SQUARE = load("kernelkit.ops.square")["square"]

# Inputs at the edges the wrapper handles: a non-power-of-two block, a transposed (non-contiguous) view whose
# output layout differs from the reference's, one row, and the empty input.
EDGE_INPUTS = {
    "7x5": lambda: torch.randn(7, 5),
    "transposed": lambda: torch.randn(6, 4).t(),
    "one_row": lambda: torch.randn(1, 9),
    "empty": lambda: torch.randn(0, 5),
}


@pytest.fixture(scope="module")
def square_eager():
    return kk.torch_op(SQUARE, "eager")


@pytest.mark.parametrize("shape", list(EDGE_INPUTS))
def test_opcheck_square_eager(square_eager, shape):
    x = EDGE_INPUTS[shape]()
    torch.library.opcheck(square_eager, (x,))
    torch.testing.assert_close(square_eager(x), x * x, rtol=0, atol=0)


def test_opcheck_square_eager_with_gradients(square_eager):
    x = torch.randn(7, 5, requires_grad=True)
    torch.library.opcheck(square_eager, (x,))
    (grad,) = torch.autograd.grad(square_eager(x).sum(), x)
    torch.testing.assert_close(grad, 2 * x.detach())  # the reference's gradient


TRITON_OPCHECK = textwrap.dedent("""
    from kernelkit import backends
    backends.prepare_process("cpu")  # TRITON_INTERPRET=1 before triton is imported: the kernel runs on the CPU
    import torch
    import kernelkit as kk
    from kernelkit.target import load

    op = kk.torch_op(load("kernelkit.ops.square")["square"], "triton_rowwise")
    assert str(op) == "kernelkit.square_triton_rowwise", op
    for x in (torch.randn(7, 5), torch.randn(6, 4).t(), torch.randn(0, 5), torch.randn(3, 5, requires_grad=True)):
        torch.library.opcheck(op, (x,))
        torch.testing.assert_close(op(x), x * x, rtol=0, atol=0)
    print("opcheck ok")
""")


@pytest.mark.slow
def test_opcheck_square_triton_rowwise_in_the_interpreter():
    # A subprocess: Triton reads TRITON_INTERPRET when a kernel is defined, and this test process may have
    # imported triton already (inductor does) without it.
    proc = subprocess.run([sys.executable, "-c", TRITON_OPCHECK], capture_output=True, text=True, timeout=180,
                          env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "opcheck ok" in proc.stdout


class TinyModel(torch.nn.Module):
    """A linear layer, then the custom op: (rows, 5) float32 -> (rows, 3) float32."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.kernelkit.square_eager(self.linear(x)) + 1


def test_model_with_the_op_compiles_fullgraph_and_matches_the_reference(square_eager):
    torch.manual_seed(0)
    model = TinyModel()
    compiled = torch.compile(model, fullgraph=True)  # fullgraph: a graph break would raise
    x = torch.randn(4, 5)
    out = compiled(x)
    expected = SQUARE.reference(model.linear(x)) + 1
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    got = model.linear.weight.grad.clone()
    model.zero_grad()
    expected.sum().backward()
    torch.testing.assert_close(got, model.linear.weight.grad)


def test_registering_again_returns_the_same_op_and_names_are_guarded(square_eager):
    assert kk.torch_op(SQUARE, "eager") is square_eager
    assert kk.torch_op("square", "eager") is square_eager
    assert str(square_eager) == "kernelkit.square_eager"
    with pytest.raises(SpecError, match="already impl 'eager' of op 'square'; pass name="):
        kk.torch_op(SQUARE, "triton_rowwise", name="square_eager")
    torch.library.custom_op("kernelkit::made_elsewhere", lambda x: x.clone(), mutates_args=(),
                            schema="(Tensor x) -> Tensor")
    with pytest.raises(SpecError, match="made_elsewhere is already defined outside kernelkit.torch_op"):
        kk.torch_op(SQUARE, "eager", name="made_elsewhere")
    with pytest.raises(SpecError, match="not an identifier"):
        kk.torch_op(SQUARE, "eager", name="square.eager")


def test_unknown_impl_and_the_compile_baseline_are_clear_errors():
    with pytest.raises(SpecError, match="op 'square' has no impl 'fast'; its impls: eager, triton_rowwise"):
        kk.torch_op(SQUARE, "fast")
    with pytest.raises(SpecError, match="'compile' is torch.compile of the reference itself"):
        kk.torch_op(SQUARE, "compile")


@kk.op(sizes=[(4, 3)])
def axpy_rowsum(x, y, alpha: float = 2.0, *, relu: bool = False):
    """(alpha * x + y, optionally relu'd; its row sums): (M, N) x2 -> (M, N), (M,)."""
    out = alpha * x + y
    return (out.relu() if relu else out), out.sum(-1)


@axpy_rowsum.impl("eager_fused")
def axpy_rowsum_eager(x, y, alpha=2.0, *, relu=False):
    out = torch.add(y, x, alpha=alpha)
    return (torch.relu(out) if relu else out), out.sum(-1)


def test_schema_is_read_off_the_reference():
    assert schema_of(SQUARE) == "(Tensor x) -> Tensor"
    assert schema_of(axpy_rowsum) == "(Tensor x, Tensor y, float alpha=2.0, *, bool relu=False) -> (Tensor, Tensor)"

    @kk.op(sizes=[(4,)])
    def scaled(x: torch.Tensor, bias: torch.Tensor | None = None, n: int = 2, how: str = "a") -> torch.Tensor:
        return x * n if bias is None else x * n + bias

    assert schema_of(scaled) == '(Tensor x, Tensor? bias=None, SymInt n=2, str how="a") -> Tensor'


def test_signatures_an_operator_cannot_take_are_spec_errors():
    @kk.op(sizes=[(4,)], inputs=lambda size, dtype, device, seed: (torch.ones(size),))
    def star(x, *rest):
        return x

    @kk.op(sizes=[(4,)])
    def listy(x, dims=(0,)):
        return x.sum(dims)

    @kk.op(sizes=[(4,)])
    def count(x):
        return int(x.numel())

    with pytest.raises(SpecError, match=r"fixed signature, but the reference takes \*rest"):
        schema_of(star)
    with pytest.raises(SpecError, match=r"parameter 'dims' \(tuple\) has no operator type"):
        schema_of(listy)
    with pytest.raises(SpecError, match="the reference returns a int; an operator returns a tensor"):
        schema_of(count)


def test_tuple_outputs_keyword_only_arguments_and_gradients():
    op = kk.torch_op(axpy_rowsum, "eager_fused")
    x, y = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    torch.library.opcheck(op, (x, y, 0.5), {"relu": True})
    out, sums = op(x, y, 0.5, relu=True)
    ref_out, ref_sums = axpy_rowsum.reference(x, y, 0.5, relu=True)
    torch.testing.assert_close((out, sums), (ref_out, ref_sums))
    got = torch.autograd.grad((out.sum() + sums.sum()), (x, y))
    expected = torch.autograd.grad((ref_out.sum() + ref_sums.sum()), (x, y))
    torch.testing.assert_close(got, expected)


def test_outputs_are_fresh_even_when_the_impl_returns_a_view_of_an_input():
    @kk.op(sizes=[(4, 3)])
    def first_rows(x):
        return x[:2].clone()

    @first_rows.impl("eager_view")
    def first_rows_view(x):
        return x[:2]  # a view of the input: legal in Python, not for a custom op

    op = kk.torch_op(first_rows, "eager_view")
    x = torch.randn(4, 3)
    out = op(x)
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    torch.testing.assert_close(out, x[:2])
    torch.library.opcheck(op, (x,))


@pytest.mark.gpu
@pytest.mark.parametrize("impl", list(SQUARE.impls))
def test_every_square_impl_as_a_custom_op_on_cuda(impl):
    """opcheck on CUDA, then a module calling the op under torch.compile(fullgraph=True): no graph break."""
    dtype = SQUARE.impls[impl].dtypes[0] if SQUARE.impls[impl].dtypes else torch.float32
    op = kk.torch_op(SQUARE, impl)
    x = torch.randn(64, 48, device="cuda", dtype=dtype)
    torch.library.opcheck(op, (x,))

    class Model(torch.nn.Module):
        def forward(self, t):
            return op(t + 1) * 2

    compiled = torch.compile(Model(), fullgraph=True)
    torch.testing.assert_close(compiled(x), (x + 1) * (x + 1) * 2)


def test_a_declared_backward_op_gives_the_gradient_through_its_same_named_impl(monkeypatch):
    """softmax's eager impl as an operator: its backward runs softmax_backward's eager impl (counted), and the
    gradient equals autograd of the reference."""
    from kernelkit.ops import softmax as softmax_module

    calls = []
    impl = softmax_module.softmax_backward.impls["eager"]
    monkeypatch.setitem(softmax_module.softmax_backward.impls, "eager",
                        dataclasses.replace(impl, fn=lambda y, dy: calls.append(1) or impl.fn(y, dy)))
    operator = kk.torch_op(softmax_module.softmax, "eager", name="softmax_eager_bwcheck")
    x = torch.randn(5, 33, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(5, 33, dtype=torch.float64)
    (got,) = torch.autograd.grad(operator(x), x, dy)
    (want,) = torch.autograd.grad(softmax_module.softmax.reference(x), x, dy)
    assert calls == [1]
    torch.testing.assert_close(got, want)
    compiled = torch.compile(lambda t: (operator(t) * dy).sum(), fullgraph=True)  # the backward traces too
    (again,) = torch.autograd.grad(compiled(x), x)
    torch.testing.assert_close(again, want)


def test_every_forward_with_a_backward_op_names_impls_that_exist_there():
    from kernelkit.ops import gelu as gelu_module
    from kernelkit.ops import softmax as softmax_module

    for forward in (gelu_module.gelu, gelu_module.gelu_erf, softmax_module.softmax):
        assert forward.backward is not None
        shared = set(forward.impls) & set(forward.backward.op.impls)
        assert shared, forward.name  # at least one kernel impl has its own backward


@pytest.mark.gpu
@pytest.mark.parametrize(("module", "op_name", "impl"), [
    ("gelu", "gelu", "triton_flat"), ("gelu", "gelu", "cuda_vec"), ("gelu", "gelu_erf", "cuda_vec"),
    ("softmax", "softmax", "triton_rowwise"), ("softmax", "softmax", "cuda_warp"),
])
def test_kernel_backwards_match_autograd_of_the_reference_on_gpu(module, op_name, impl):
    import importlib

    forward = getattr(importlib.import_module(f"kernelkit.ops.{module}"), op_name)
    operator = kk.torch_op(forward, impl)
    x = torch.randn(257, 1000, device="cuda", requires_grad=True)
    dy = torch.randn(257, 1000, device="cuda")
    (got,) = torch.autograd.grad(operator(x), x, dy)
    (want,) = torch.autograd.grad(forward.reference(x.double()), x, dy.double())
    torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-4)
    compiled = torch.compile(lambda t: operator(t).sum(), fullgraph=True)
    (again,) = torch.autograd.grad(compiled(x), x)
    torch.testing.assert_close(again, torch.autograd.grad(forward.reference(x.double()).sum(), x)[0].float(),
                               atol=1e-5, rtol=1e-4)
