"""Every command's default table fits 120 columns on the built-in ops: rendered on a page wider than the table
wants, its rows are at most 120 wide and no cell is cut short. The results are made up (every impl and baseline
of every built-in op at its CPU and GPU sizes, in every dtype, with the longest values a cell can hold), so the test
measures the layout, not a run."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kernelkit.measure.measurement import BenchResult, Ceiling, Measurement
from kernelkit.measure.stats import Ratio
from kernelkit.results import CaseResult, Status
from kernelkit.spec import BASELINES, dtype_name

WIDTH = 120
EDGES = tuple("┏┃┡│├└┗┣╭╰")


def render(*renderables: object, print_with=None) -> str:
    console = Console(file=io.StringIO(), width=400, color_system=None)
    for r in renderables:
        console.print(r)
    if print_with is not None:
        print_with(console)
    return console.file.getvalue()


def assert_fits(text: str) -> None:
    rows = [line.rstrip() for line in text.splitlines() if line.startswith(EDGES)]
    assert rows, text
    wide = [r for r in rows if len(r) > WIDTH]
    assert not wide, f"{len(wide[0])} columns:\n" + "\n".join(wide[:3])
    assert not any("…" in r for r in rows), text


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


def _measurement(impl: str, device: str) -> Measurement:
    m = Measurement(label=impl, mode="cold", device=device, device_name="NVIDIA H100 80GB HBM3",
                    samples=[123.4e-3, 150e-3, 99.9e-3, 130e-3] * 5, first_call=1.0, warmup_calls=3,
                    stop_reason="budget", bytes=10**12, flops=10**15)
    m.ceiling = Ceiling(bandwidth_gbps=3000.0, tflops=900.0, flops_kind="bf16", pct_bandwidth=134.0, pct_flops=99.0)
    return m


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
                                measurement=None if failed else _measurement(impl, device))
                if not failed and impl not in BASELINES:
                    r.speedups = {name: Ratio(1234.5, 1200.0, 1300.0) for name in BASELINES}
                out.append(r)
    return out


def test_the_default_bench_table_fits_on_every_builtin_op(builtin_ops):
    from kernelkit.report.bench_table import bench_table, note_lines

    for op in builtin_ops:
        results = bench_results(op)
        text = render(bench_table(results, wide=False), *note_lines(results))
        assert_fits(text)
        assert "1234x ↑" in text and "INCORRECT" in text and "NUMERICS" in text and "note " in text
    wide = render(bench_table(bench_results(builtin_ops[0]), wide=True))
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
        text = render(print_with=lambda c, rs=results: print_report(c, rs, "cuda", len(rs)))
        assert_fits(text)
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
        assert_fits(render(print_with=lambda c: print_comparison(c, result)))
        assert_fits(render(runs_table(store.runs(), store.path)))
    note = {"what": "torch.mm(a, b, out=c)", "size": "8192x8192x8192", "mode": "hot", "n": 41, "iqr_rel": 0.031,
            "shortage": "only 20.1 GiB free: buffers of 8.05 GiB instead of 2 GiB; 1.2x the L2, so the copy rate "
                        "may include cache hits"}
    ceilings = Ceilings("NVIDIA H100 80GB HBM3", "k", 3000.0, {"fp32": 51.0, "tf32": 378.0, "bf16": 740.0},
                        {"copy": {**note, "what": "y.copy_(x)", "buffer_bytes": 2**31}, "fp32": note, "tf32": note,
                         "bf16": note, "fp8": {"skipped": "fp8 needs sm_89 or newer"}},
                        "2026-11-23T15:02:11+00:00")
    assert_fits(render(ceilings_table(ceilings)))


def test_the_ops_table_fits(capsys):
    from typer.testing import CliRunner

    from kernelkit.cli import app

    result = CliRunner().invoke(app, ["ops"])
    assert result.exit_code == 0
    assert_fits(result.output)
