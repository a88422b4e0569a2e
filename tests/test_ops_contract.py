"""What every built-in op must satisfy, whatever it computes: one case each, at its smallest CPU size.

Per op: it has sizes, CPU sizes and dtypes; every impl belongs to a registered backend and declares only dtypes the
op has; every impl whose backend runs on the CPU passes the check there (or is SKIPPED, saying why: a dtype the
interpreter gets wrong, a library that needs a GPU); and where the op declares a backward op, that op is built in
and its reference is the gradient of this op's reference.
"""

from __future__ import annotations

import math

import pytest
import torch

import kernelkit as kk
from kernelkit import backends, verify
from kernelkit.ops import BUILTIN_OPS
from kernelkit.results import Status
from kernelkit.spec import Op, Size, seeded_normal
from kernelkit.target import open_target


def _op(name: str) -> Op:
    return open_target(name, "cpu").op()


def _smallest_size(op: Op) -> Size:
    return min((s for s in op.cpu_sizes if math.prod(s)), key=math.prod)


def _one_dtype(op: Op) -> torch.dtype:
    return torch.float32 if torch.float32 in op.dtypes else op.dtypes[0]


@pytest.mark.parametrize("name", list(BUILTIN_OPS))
def test_the_op_is_declared_whole(name: str) -> None:
    op = _op(name)
    assert op.name == name and op.sizes and op.cpu_sizes and op.dtypes and op.impls
    for impl in op.impls.values():
        assert impl.backend in backends.names(), impl
        assert set(impl.dtypes) <= set(op.dtypes), (impl.name, impl.dtypes, op.dtypes)


@pytest.mark.parametrize("name", list(BUILTIN_OPS))
def test_every_impl_that_runs_on_the_cpu_passes_there(name: str, cpu_process: None) -> None:
    op = _op(name)
    runnable = [impl.name for impl in op.impls.values() if backends.backend(impl.backend).runs_on("cpu")]
    if not runnable:
        pytest.skip(f"no impl of {name} runs on the CPU")
    report = kk.check(name, impls=runnable, device="cpu", isolate=False, sizes=[_smallest_size(op)],
                      dtypes=[_one_dtype(op)])
    assert [r.impl for r in report.results] == runnable
    for r in report.results:
        assert r.status in (Status.PASSED, Status.SKIPPED), (r.case_id, r.status, r.message)
        assert r.status is Status.PASSED or r.message, r.case_id  # a skip says why


@pytest.mark.parametrize("name", [name for name in BUILTIN_OPS if _op(name).backward is not None])
def test_a_declared_backward_is_the_gradient_of_the_reference(name: str) -> None:
    op = _op(name)
    backward = op.backward
    assert backward.op.name in BUILTIN_OPS and _op(backward.op.name) is backward.op
    inputs = op.make_inputs(_smallest_size(op), _one_dtype(op), torch.device("cpu"), 0)
    wide = [verify.to_reference_precision(x) for x in inputs]  # float64: the comparison below is about math
    for x in wide:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            x.requires_grad_()
    outputs = verify.as_outputs(op.reference(*wide))
    dy = seeded_normal(tuple(outputs[0].shape), outputs[0].dtype, "cpu", 1)
    detached = [x.detach() if isinstance(x, torch.Tensor) else x for x in (*wide, *outputs)]
    got = backward.op.reference(*backward.saved(*detached), dy)
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    expected = torch.autograd.grad(outputs[0], wide[:len(got)], dy)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(g.double(), e, rtol=1e-6, atol=1e-9, msg=f"{name}: gradient of input {i}")
