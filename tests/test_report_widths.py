"""Every command's default table fits 120 columns on the built-in ops: rendered on a page wider than the table
wants, its rows are at most 120 wide and no cell is cut short. The results are made up (every impl and baseline
of every built-in op at its CPU and GPU sizes, in every dtype, with the longest values a cell can hold), so the test
measures the layout, not a run."""

from __future__ import annotations

import pytest

from kernelkit.measure.measurement import BenchResult, Ceiling, Measurement
from kernelkit.measure.stats import Ratio
from kernelkit.results import CaseResult, Status
from kernelkit.spec import BASELINES, dtype_name
from resultkit import assert_fits, measurement, render

WIDTH = 120
PAGE = 400  # wider than any table wants: what a table does at WIDTH is its own choice


@pytest.fixture(scope="module")
def builtin_ops():
    from kernelkit.ops import BUILTIN_OPS
    from kernelkit.target import load, resolve

    return [op for name in BUILTIN_OPS for op in load(resolve(name)).values()]


def _sizes(op):
    """The op's two widest sizes as the tables print them (a table is as wide as its widest cells; rendering every
    size of every op costs minutes for the same widths)."""
    sizes = list(dict.fromkeys([*op.cpu_sizes, *op.bench_sizes, *op.sizes]))
    return sorted(sizes, key=lambda s: len("x".join(map(str, s))), reverse=True)[:2]


def _longest_measurement(impl: str, device: str) -> Measurement:
    return measurement(impl, [123.4e-3, 150e-3, 99.9e-3, 130e-3] * 5, mode="cold", device=device, first_call=1.0,
                       stop_reason="budget", bytes=10**12, flops=10**15,
                       ceiling=Ceiling(bandwidth_gbps=3000.0, tflops=900.0, flops_kind="bf16", pct_bandwidth=134.0,
                                       pct_flops=99.0))


def bench_results(op, device: str = "cuda") -> list[BenchResult]:
    out = []
    for size in _sizes(op):
        for dtype in op.dtypes:
            for i, impl in enumerate([*op.impls, *BASELINES]):
                failed = i == 1
                r = BenchResult(op.name, impl, "triton", size, dtype_name(dtype), device, "cold",
                                Status.INCORRECT_NUMERICS if failed else Status.PASSED,
                                role="baseline" if impl in BASELINES else "impl",
                                message="the last timed call's output is wrong: 4032 of 4096 elements differ" * failed,
                                measurement=None if failed else _longest_measurement(impl, device))
                if not failed and impl not in BASELINES:
                    r.speedups = {name: Ratio(1234.5, 1200.0, 1300.0) for name in BASELINES}
                out.append(r)
    return out


def test_the_default_bench_table_fits_on_every_builtin_op(builtin_ops):
    from kernelkit.report.bench_table import bench_table, note_lines

    for op in builtin_ops:
        results = bench_results(op)
        text = render(bench_table(results, wide=False), *note_lines(results), width=PAGE)
        assert_fits(text, WIDTH)
        assert "1234x ↑" in text and "INCORRECT" in text and "NUMERICS" in text and "note " in text
    wide = render(bench_table(bench_results(builtin_ops[0]), wide=True), width=PAGE)
    assert "p20-p80" in wide and "notes" in wide  # --wide: every column


def test_the_default_check_table_fits_on_every_builtin_op(builtin_ops):
    from kernelkit.report.check_table import print_report

    for op in builtin_ops:
        results = []
        for size in _sizes(op):
            for dtype in op.dtypes:
                for i, impl in enumerate([*op.impls, "compile"]):
                    r = CaseResult(op.name, impl, "triton", size, dtype_name(dtype), 1, "cuda",
                                   Status.INCORRECT_NUMERICS if i == 1 else Status.PASSED, seconds=123.45,
                                   max_abs_err=1.5e-3, message="4032 of 4096 elements differ; max abs err 1.2")
                    r.details = {"autotune": {f"{impl}_kernel": {"config": "BLOCK_SIZE=1024, num_warps=4",
                                                                   "tuning_s": 1.5}}}
                    results.append(r)
        text = render(print_with=lambda c, rs=results: print_report(c, rs, "cuda", len(rs)), width=PAGE)
        assert_fits(text, WIDTH)
        assert "note " in text and "BLOCK_SIZE=1024" in text


def test_the_default_compare_runs_and_calibrate_tables_fit(builtin_ops, tmp_path):
    from kernelkit.measure.ceilings import Ceilings
    from kernelkit.report.bench_table import ceilings_table
    from kernelkit.report.runs_table import print_comparison, runs_table
    from kernelkit.store import Store, compare

    with Store.open(tmp_path / "r.sqlite") as store:
        for _ in range(2):
            run = store.begin_run("kernelkit bench " + " ".join(op.name for op in builtin_ops) + " --mode cold "
                                  "--dtypes float32,bf16 --budget 10", {"device_name": "NVIDIA H100 80GB HBM3"},
                                  op=",".join(op.name for op in builtin_ops), device="NVIDIA H100 80GB HBM3")
            for op in builtin_ops:
                # The widest rows of each op (longest case ids, a failure among them): every result would be
                # thousands of committed writes, minutes on a slow disk, for the same widths.
                rows = sorted(bench_results(op), key=lambda r: (len(r.case_id), r.status.failed), reverse=True)
                for r in rows[:6]:
                    store.add_result(run, r)
            store.finish_run(run)
        result = compare(store, -2, -1)
        assert_fits(render(print_with=lambda c: print_comparison(c, result), width=PAGE), WIDTH)
        assert_fits(render(runs_table(store.runs(), store.path), width=PAGE), WIDTH)
    note = {"what": "torch.mm(a, b, out=c)", "size": "8192x8192x8192", "mode": "hot", "n": 41, "iqr_rel": 0.031,
            "shortage": "only 20.1 GiB free: buffers of 8.05 GiB instead of 2 GiB; 1.2x the L2, so the copy rate "
                        "may include cache hits"}
    ceilings = Ceilings("NVIDIA H100 80GB HBM3", "k", 3000.0, {"fp32": 51.0, "tf32": 378.0, "bf16": 740.0},
                        {"copy": {**note, "what": "y.copy_(x)", "buffer_bytes": 2**31}, "fp32": note, "tf32": note,
                         "bf16": note, "fp8": {"skipped": "fp8 needs sm_89 or newer"}},
                        "2026-11-23T15:02:11+00:00")
    assert_fits(render(ceilings_table(ceilings), width=PAGE), WIDTH)


def test_the_ops_table_fits(capsys):
    from typer.testing import CliRunner

    from kernelkit.cli import app

    result = CliRunner().invoke(app, ["ops"])
    assert result.exit_code == 0
    assert_fits(result.output, WIDTH)
