"""Inputs that follow the reference: shapes= on kk.op, the notice when defaults feed several parameters, and a
reference that rejects its op's own inputs reported as the op's INPUT_ERROR, not the impl's failure."""

import textwrap
import warnings

import pytest
import torch

import kernelkit as kk
from kernelkit.errors import SpecError
from kernelkit.results import Status

RMSNORM = '''
import torch
import kernelkit as kk


@kk.op(sizes=[(64, 48)], cpu_sizes=[(5, 48), (1, 7)]{shapes})
def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


@rmsnorm.impl("eager_rows")
def rmsnorm_rows(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w[: x.shape[-1]]
'''


def _write(tmp_path, shapes: str):
    path = tmp_path / "rms.py"
    path.write_text(textwrap.dedent(RMSNORM.format(shapes=shapes)))
    return str(path)


def test_shapes_give_each_parameter_its_own_shape_seeded_like_the_defaults():
    @kk.op(sizes=[(6, 5)], shapes=lambda m, n: ((m, n), (n,)))
    def scale_rows(x, w):
        return x * w

    x, w = scale_rows.make_inputs((6, 5), torch.float32, torch.device("cpu"), 2)
    again = scale_rows.make_inputs((6, 5), torch.float32, torch.device("cpu"), 2)
    assert x.shape == (6, 5) and w.shape == (5,)
    assert torch.equal(x, again[0]) and torch.equal(w, again[1])
    assert not torch.equal(x, scale_rows.make_inputs((6, 5), torch.float32, torch.device("cpu"), 3)[0])


def test_a_wrong_shapes_fails_when_the_op_is_declared_and_names_the_fix():
    with pytest.raises(SpecError, match="gave 1 shapes for 2 parameters"):
        @kk.op(sizes=[(6, 5)], shapes=lambda m, n: ((m, n),))
        def one_short(x, w):
            return x * w
    with pytest.raises(SpecError, match="one argument per dimension"):
        @kk.op(sizes=[(6, 5)], shapes=lambda m: ((m,), (m,)))
        def wrong_arity(x, w):
            return x * w
    with pytest.raises(SpecError, match="not both"):
        @kk.op(sizes=[(6, 5)], shapes=lambda m, n: ((m, n), (n,)), inputs=lambda *a: ())
        def both(x, w):
            return x * w


def test_defaults_for_several_parameters_say_so_and_point_at_shapes():
    @kk.op(sizes=[(6, 5)])
    def add(x, y):
        return x + y

    @kk.op(sizes=[(6, 5)])
    def one(x):
        return x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        add.make_inputs((6, 5), torch.float32, torch.device("cpu"), 0)
        one.make_inputs((6, 5), torch.float32, torch.device("cpu"), 0)
    assert len(caught) == 1
    assert "(x, y)" in str(caught[0].message) and "shapes=lambda M, N" in str(caught[0].message)


def test_rmsnorm_with_shapes_passes_check(tmp_path, cpu_process):
    path = _write(tmp_path, ", shapes=lambda M, N: ((M, N), (N,))")
    report = kk.check(path, device="cpu", isolate=False)
    assert [r.status for r in report.results] == [Status.PASSED, Status.PASSED]
    assert not any("shapes=" in w for r in report.results for w in r.warnings)


def test_rmsnorm_without_shapes_reports_the_notice_once_per_case(tmp_path, cpu_process):
    path = _write(tmp_path, "")
    report = kk.check(path, device="cpu", isolate=False, sizes=[(5, 48)])
    (result,) = report.results
    assert any("gets a tensor of the case's full size" in w and "shapes=" in w for w in result.warnings)


def test_a_reference_that_raises_on_its_inputs_is_the_ops_input_error(tmp_path, cpu_process):
    path = tmp_path / "mismatch.py"
    path.write_text(textwrap.dedent('''
        import kernelkit as kk

        @kk.op(sizes=[(4, 6)], shapes=lambda m, n: ((m, n), (m + 1,)))
        def scale(x, w):
            return x * w

        @scale.impl("eager_scale")
        def scale_eager(x, w):
            return x * w[: x.shape[-1]]
    '''))
    report = kk.check(str(path), device="cpu", isolate=False)
    (result,) = report.results
    assert result.status is Status.INPUT_ERROR
    assert "reference raised on the generated inputs (4x6, 5)" in result.message
    assert "shapes=" in result.message and result.status.failed
