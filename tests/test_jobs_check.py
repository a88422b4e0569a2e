"""The check job: judge's order of checks, a failed load as the case's status, and warnings that travel back."""

from __future__ import annotations

import textwrap
import warnings

import torch
from rich.console import Console

import kernelkit as kk
from kernelkit.jobs.check import CheckJob, judge
from kernelkit.report.check_table import print_report
from kernelkit.results import Status
from kernelkit.spec import Case

REF = (torch.ones(4, dtype=torch.float64),)
LO = (torch.ones(4),)


def test_judge_checks_inputs_then_structure_then_values():
    x, before = torch.zeros(3), torch.ones(3)  # "mutated": differs from its snapshot
    wrong_shape, wrong_values = (torch.ones(5),), (torch.zeros(4),)
    assert judge(wrong_shape, REF, LO, 1e-5, 1e-5, inputs=(x,), snapshot=(before,)).status is Status.INPUT_MUTATED
    assert judge(wrong_shape, REF, LO, 1e-5, 1e-5).status is Status.INCORRECT_SHAPE  # no snapshot: inputs unjudged
    assert judge((torch.ones(4, dtype=torch.float16),), REF, LO, 1e-5, 1e-5).status is Status.INCORRECT_DTYPE
    verdict = judge(wrong_values, REF, LO, 1e-5, 1e-5)
    assert verdict.status is Status.INCORRECT_NUMERICS and "4 of 4 elements differ" in verdict.message
    assert judge(LO, REF, LO, 1e-5, 1e-5).status is Status.PASSED


def test_a_case_whose_op_fails_to_load_is_a_runtime_error():
    result = CheckJob(Case("kernelkit.ops.no_such_module", "square", "eager", (4,), "float32", 0)).execute("cpu")
    assert result.status is Status.RUNTIME_ERROR and "ModuleNotFoundError" in result.message


def test_warnings_of_a_check_travel_in_its_result_and_are_printed(tmp_path):
    path = tmp_path / "warns.py"
    path.write_text(textwrap.dedent("""
        import warnings
        import kernelkit as kk

        @kk.op(sizes=[(8,)], cpu_sizes=[(8,), (9,)])
        def double(x):
            return 2 * x

        @double.impl("eager_warns")
        def double_warns(x):
            warnings.warn("this kernel is deprecated", DeprecationWarning, stacklevel=1)
            return x + x
    """))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = kk.check(str(path), device="cpu", isolate=False)
    assert [r.status for r in report.results] == [Status.PASSED] * 2
    assert all(any("DeprecationWarning: this kernel is deprecated" in w for w in r.warnings) for r in report.results)
    console = Console(record=True, width=200)
    print_report(console, report.results, "cpu", 2)
    text = console.export_text()
    assert text.count("this kernel is deprecated") == 1 and "and 1 more" in text


def test_judge_checks_the_kind_of_the_return_value_after_the_inputs():
    assert judge(LO, REF, LO, 1e-5, 1e-5, kinds=("tuple", "tensor")).status is Status.INCORRECT_SHAPE
    assert judge(LO, REF, LO, 1e-5, 1e-5, kinds=("tensor", "list")).status is Status.INCORRECT_SHAPE
    assert judge(LO, REF, LO, 1e-5, 1e-5, kinds=("list", "tuple")).status is Status.PASSED
    assert judge(LO, REF, LO, 1e-5, 1e-5, kinds=("tensor", "tensor")).status is Status.PASSED
    x, before = torch.zeros(3), torch.ones(3)
    assert judge(LO, REF, LO, 1e-5, 1e-5, inputs=(x,), snapshot=(before,),
                 kinds=("tuple", "tensor")).status is Status.INPUT_MUTATED


def test_the_plain_path_fails_a_one_tuple_or_list_where_the_reference_returns_a_tensor(tmp_path):
    path = tmp_path / "kinds.py"
    path.write_text(textwrap.dedent("""
        import kernelkit as kk

        @kk.op(sizes=[(8,)], cpu_sizes=[(8,)])
        def double(x):
            return 2 * x

        @double.impl("eager_tuple")
        def as_tuple(x):
            return (x + x,)

        @double.impl("eager_list")
        def as_list(x):
            return [x + x]

        @double.impl("eager_tensor")
        def as_tensor(x):
            return x + x

        @kk.op(sizes=[(8,)], cpu_sizes=[(8,)])
        def pair(x):
            return x + 1, x - 1

        @pair.impl("eager_list")
        def pair_list(x):
            return [x + 1, x - 1]
    """))
    report = kk.check(str(path), device="cpu", isolate=False, strict=False)
    got = {(r.op, r.impl): r for r in report.results}
    for impl, kind in (("eager_tuple", "tuple"), ("eager_list", "list")):
        result = got[("double", impl)]
        assert result.status is Status.INCORRECT_SHAPE, result.message
        assert f"it returned a {kind} where the reference returns a tensor" in result.message
    assert got[("double", "eager_tensor")].status is Status.PASSED
    assert got[("pair", "eager_list")].status is Status.PASSED
