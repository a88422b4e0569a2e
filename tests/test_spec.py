import pytest
import torch

import kernelkit as kk
from kernelkit.errors import SpecError
from kernelkit.spec import parse_dtype, parse_size, seeded_normal


def make_op(**kwargs):
    @kk.op(sizes=[(8, 3)], **kwargs)
    def double_it(x):
        return 2 * x

    return double_it


def test_op_collects_reference_sizes_and_shrinks_cpu_sizes():
    @kk.op(sizes=[(4096, 4096), (1823, 781)], dtypes=[torch.float32, torch.bfloat16])
    def square(x):
        """y = x * x."""
        return x * x

    assert square.name == "square" and square.description == "y = x * x."
    assert square.sizes_for("cuda") == [(4096, 4096), (1823, 781)]
    assert square.sizes_for("cpu") == [(64, 64)]
    assert square(torch.tensor(3.0)) == 9.0


def test_impl_backend_is_read_from_the_name():
    op = make_op()
    op.impl("triton_flat")(lambda x: x)
    op.impl("cuda")(lambda x: x)
    op.impl("fast", backend="numba")(lambda x: x)
    assert {n: i.backend for n, i in op.impls.items()} == {"triton_flat": "triton", "cuda": "cuda", "fast": "numba"}


def test_impl_errors_name_the_fix():
    op = make_op()
    with pytest.raises(SpecError, match="start its name with one of"):
        op.impl("fast")
    with pytest.raises(SpecError, match="unknown backend 'opencl'"):
        op.impl("x", backend="opencl")
    op.impl("eager")(lambda x: x)
    with pytest.raises(SpecError, match="already has an impl named 'eager'"):
        op.impl("eager")


def test_default_inputs_are_seeded_one_tensor_per_parameter():
    @kk.op(sizes=[(5, 7)])
    def add(x, y, alpha=1.0):
        return x + alpha * y

    a = add.make_inputs((5, 7), torch.float16, torch.device("cpu"), 3)
    b = add.make_inputs((5, 7), torch.float16, torch.device("cpu"), 3)
    c = add.make_inputs((5, 7), torch.float16, torch.device("cpu"), 4)
    assert len(a) == 2 and a[0].dtype == torch.float16 and a[0].shape == (5, 7)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], a[1]) and not torch.equal(a[0], c[0])


def test_cost_model_defaults_to_inputs_plus_outputs():
    op = make_op()
    x = torch.zeros(8, 3)
    assert op.cost([x], [x.clone()]) == (2 * 24 * 4, None)
    assert op.cost([x], [x, x.view(-1)]) == (24 * 4, None)  # an output in the input's memory: one tensor of traffic
    assert op.cost([x], [*x.chunk(2)]) == (24 * 4, None)  # views of one buffer: its bytes once, not more
    op2 = make_op(bytes=lambda x: 7, flops=lambda x: x.numel())
    assert op2.cost([x], [x]) == (7, 24)


def test_sizes_and_dtypes_parse_with_clear_errors():
    assert parse_size("1823x781") == (1823, 781)
    assert parse_size("4096") == (4096,)
    with pytest.raises(SpecError, match="e.g. 1823x781"):
        parse_size("big")
    assert parse_dtype("bf16") is torch.bfloat16
    with pytest.raises(SpecError, match="unknown dtype 'float8'"):
        parse_dtype("float8")
    with pytest.raises(SpecError, match="at least one size"):
        kk.op(sizes=[])(lambda x: x)


def test_seeded_normal_is_device_independent():
    a = seeded_normal((3, 3), torch.float32, "cpu", 11)
    assert torch.equal(a, seeded_normal((3, 3), torch.float32, "cpu", 11))
