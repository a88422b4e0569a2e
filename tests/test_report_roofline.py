"""Where each case sits on the roofline (report.roofline: intensity, ridge, which ceiling binds), the table's bound
and peak-memory columns, the CSV's, and the PNG/SVG roofline and peak-memory figures, on synthetic results."""

from __future__ import annotations

import csv
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kernelkit.measure.measurement import BenchResult, Ceiling
from kernelkit.report import bench_table as bt
from kernelkit.report import export, plot, roofline
from kernelkit.report.html import RunData, render_report
from resultkit import bench_result, ceiling_at, even_samples, measurement, render

COPY_GBPS = 3000.0
PEAKS = {"float32": (50.0, "fp32"), "bfloat16": (750.0, "bf16"), "fp8": (1500.0, "fp8")}


def timed(op: str, impl: str, size: tuple[int, ...], dtype: str, pct_of_roof: float, nbytes: int,
          flops: int | None, *, compute: str = "", peak_bytes: int | None = None, calibrated: bool = True,
          role: str = "impl") -> BenchResult:
    """A PASSED result at ``pct_of_roof`` % of the roof at its intensity, with its % of each ceiling worked out."""
    peak, kind = PEAKS[compute or dtype]
    ai = flops / nbytes if flops else 0.0
    roof_tflops = min(COPY_GBPS * ai / 1e3, peak) if flops else None
    seconds = (flops / (roof_tflops * 1e12) if flops else nbytes / (COPY_GBPS * 1e9)) / (pct_of_roof / 100)
    ceiling = ceiling_at(seconds, nbytes, flops, COPY_GBPS, peak, kind) if calibrated else None
    m = measurement(impl, even_samples(seconds), mode="cold", first_call=seconds * 10, warmup_calls=5, bytes=nbytes,
                    flops=flops, ceiling=ceiling, peak_bytes=peak_bytes)
    return bench_result(impl, size, dtype, m=m, op=op, role=role)


def square(impl: str, n: int, pct: float, **kw) -> BenchResult:
    return timed("square", impl, (n,), "float32", pct, 8 * n, n, **kw)  # 1 FLOP per 8 bytes


def softmax(impl: str, rows: int, cols: int, pct: float, **kw) -> BenchResult:
    return timed("softmax", impl, (rows, cols), "bfloat16", pct, 4 * rows * cols, 5 * rows * cols, **kw)


def matmul(impl: str, n: int, pct: float, dtype: str = "bfloat16", **kw) -> BenchResult:
    item = 4 if dtype == "float32" else 2
    return timed("matmul", impl, (n, n, n), dtype, pct, 3 * item * n * n, 2 * n**3, **kw)


# --- the math ---


def test_ridge_point_and_attainable_rate():
    c = Ceiling(COPY_GBPS, 750.0, "bf16")
    assert roofline.ridge_point(c) == pytest.approx(250.0)  # 750e12 / 3000e9 FLOP/byte
    assert roofline.attainable(c, 1.0) == pytest.approx(3.0)  # 3000 GB/s x 1 FLOP/byte = 3 TFLOP/s
    assert roofline.attainable(c, 1000.0) == 750.0
    assert roofline.ridge_point(Ceiling(COPY_GBPS)) is None and roofline.ridge_point(None) is None
    assert roofline.attainable(Ceiling(COPY_GBPS), 2.0) == pytest.approx(6.0)  # bandwidth roof only


def test_which_ceiling_binds_follows_intensity_against_the_ridge():
    sq, mm, small = square("triton_flat", 1 << 24, 80), matmul("cublas", 4096, 90), matmul("tiny", 64, 50)
    assert roofline.binding(sq.measurement) == roofline.Binding("memory", pytest.approx(80.0), "bw")
    assert roofline.binding(mm.measurement) == roofline.Binding("compute", pytest.approx(90.0), "flops")
    # a 64^3 bf16 matmul: 21 FLOP/byte, under the ridge at 250: the bandwidth roof binds it
    assert roofline.binding(small.measurement).bound == "memory"
    assert roofline.binding(small.measurement).pct == pytest.approx(50.0)


def test_bound_is_unknown_without_the_ceilings_that_decide_it():
    no_flops = timed("copy", "eager", (1024,), "float32", 70, 8192, None)
    assert roofline.binding(no_flops.measurement).bound == "memory"  # the cost model says bytes only
    assert roofline.binding(square("x", 1024, 50, calibrated=False).measurement) == roofline.Binding()
    m = matmul("x", 4096, 90).measurement
    m.ceiling.tflops, m.ceiling.pct_flops = None, None  # no matmul rate measured for the dtype
    assert roofline.binding(m) == roofline.Binding()
    assert roofline.binding(None) == roofline.Binding()


def test_a_point_on_the_roofline_carries_intensity_achieved_roof_and_ridge():
    (p,) = roofline.points([matmul("triton_mm", 4096, 70)])
    assert p.ai == pytest.approx(2 * 4096 / 6)
    assert p.achieved == pytest.approx(0.7 * 750) and p.roof == pytest.approx(750.0)
    assert p.ridge == pytest.approx(250.0) and p.binding.bound == "compute"
    assert roofline.points([timed("copy", "eager", (8,), "float32", 50, 64, None)]) == []  # no FLOPs: no point


def test_fp8_compares_with_its_compute_dtypes_ceiling():
    fp8 = matmul("triton_tma", 8192, 85, compute="fp8")
    assert fp8.measurement.ceiling.flops_kind == "fp8"
    (p,) = roofline.points([fp8])
    assert p.roof == pytest.approx(1500.0) and p.ridge == pytest.approx(500.0)


# --- table and CSV ---


def test_table_says_which_ceiling_binds_and_the_percent_of_it():
    results = [square("triton_flat", 1 << 24, 80), matmul("cublas", 4096, 90), matmul("tiny", 64, 50)]
    text = render(bt.bench_table(results), width=220)
    header = next(line for line in text.splitlines() if "impl" in line)
    assert "bound" in header and header.index("bound") < header.index("% of ceiling")
    assert "peak mem" not in header  # measured by nobody: no column
    row = {impl: next(line for line in text.splitlines() if f" {impl} " in line) for impl in ("triton_flat", "cublas",
                                                                                             "tiny")}
    assert "memory" in row["triton_flat"] and "80% bw" in row["triton_flat"]
    assert "compute" in row["cublas"] and "90% flops" in row["cublas"]
    assert "memory" in row["tiny"] and "50% bw" in row["tiny"]
    uncalibrated = render(bt.bench_table([square("x", 1024, 50, calibrated=False)]), width=220)
    assert "bound" not in uncalibrated


def test_table_and_csv_show_peak_memory_where_measured(tmp_path: Path):
    results = [softmax("eager_naive", 4096, 4096, 40, peak_bytes=256 << 20),
               softmax("triton_online", 4096, 4096, 80, peak_bytes=32 << 20),
               softmax("cpu_thing", 4096, 4096, 80)]
    text = render(bt.bench_table(results), width=220)
    assert "peak mem" in text and "256 MiB" in text and "32.0 MiB" in text
    with export.write_csv(results, tmp_path / "r.csv").open(newline="") as f:
        rows = {row["impl"]: row for row in csv.DictReader(f)}
    assert rows["eager_naive"]["peak_bytes"] == str(256 << 20) and rows["cpu_thing"]["peak_bytes"] == ""
    assert rows["eager_naive"]["bound"] == "memory"
    loaded, _ = export.read_json(export.write_json(results, tmp_path / "r.json"))
    assert [r.measurement.peak_bytes for r in loaded] == [256 << 20, 32 << 20, None]


def test_the_store_keeps_peak_memory_and_the_ceiling_that_binds(tmp_path: Path):
    from kernelkit.store import Store

    results = [softmax("eager_naive", 4096, 4096, 40, peak_bytes=96 << 20), matmul("cublas", 4096, 90)]
    with Store.open(tmp_path / "results.sqlite") as store:
        run = store.begin_run("kernelkit bench softmax", {})
        for r in results:
            store.add_result(run, r)
        store.finish_run(run)
        back = store.results(run)
    assert [r.measurement.peak_bytes for r in back] == [96 << 20, None]
    assert [roofline.binding(r.measurement).bound for r in back] == ["memory", "compute"]


@pytest.mark.parametrize(("n", "text"), [(None, ""), (0, "0 B"), (512, "512 B"), (1536, "1.50 KiB"),
                                         (256 << 20, "256 MiB"), (3 << 29, "1.50 GiB")])
def test_format_bytes(n, text):
    assert bt.format_bytes(n) == text


# --- figures ---


def sweep() -> list[BenchResult]:
    """square (fp32), softmax and matmul (bf16) at two sizes each, peak memory for softmax only."""
    out = []
    for n in (1 << 20, 1 << 26):
        out += [square("triton_flat", n, 85), square("eager", n, 70, role="baseline")]
    for rows in (1024, 8192):
        out += [softmax("eager_naive", rows, 4096, 50, peak_bytes=rows * 4096 * 2 * 3),
                softmax("triton_online", rows, 4096, 90, peak_bytes=rows * 4096 * 2)]
    for n in (1024, 4096):
        out += [matmul("triton_blocked", n, 80), matmul("eager", n, 95, role="baseline")]
    return out


def test_plot_writes_a_roofline_per_op_and_dtype_one_for_every_op_and_memory_figures(tmp_path: Path):
    names = {p.name for p in plot.plot_results(sweep(), tmp_path)}
    stems = {"square_float32_cold", "softmax_bfloat16_cold", "matmul_bfloat16_cold", "square_float32_cold_roofline",
             "softmax_bfloat16_cold_roofline", "matmul_bfloat16_cold_roofline", "roofline_cold",
             "softmax_bfloat16_cold_memory"}
    assert names == {f"{s}.{ext}" for s in stems for ext in ("png", "svg")}
    svg = (tmp_path / "roofline_cold.svg").read_text()
    ET.fromstring(svg)
    for text in ("square float32", "softmax bfloat16", "matmul bfloat16", "copy 3,000 GB/s (calibrated)",
                 "bf16 matmul 750 TFLOP/s (calibrated)", "fp32 matmul 50 TFLOP/s (calibrated)", "ridge 250",
                 "arithmetic intensity (FLOP/byte, from the cost model)", "every op"):
        assert text in svg, text
    one = (tmp_path / "matmul_bfloat16_cold_roofline.svg").read_text()
    assert "triton_blocked" in one and "eager (baseline)" in one and "square float32" not in one
    memory = (tmp_path / "softmax_bfloat16_cold_memory.svg").read_text()
    assert "eager_naive" in memory and "triton_online" in memory and "peak device memory of one call (MiB)" in memory


def test_roofline_points_sit_at_their_intensity_and_rate_in_the_figure():
    from kernelkit.report.roofline_plot import build_roofline_figure

    found = roofline.points(sweep())
    ax = build_roofline_figure(found, combined=True).axes[0]
    plotted = {(round(x, 6), round(y)) for line in ax.get_lines() if line.get_linestyle() == "None"
               for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)}
    assert plotted == {(round(p.ai, 6), round(p.achieved * 1e12)) for p in found}
    roof = next(line for line in ax.get_lines() if str(line.get_label()).startswith("copy"))
    (x0, x1), (y0, y1) = roof.get_xdata(), roof.get_ydata()
    assert y0 / x0 == pytest.approx(COPY_GBPS * 1e9) and y1 / x1 == pytest.approx(COPY_GBPS * 1e9)
    assert y1 == pytest.approx(750e12)  # the diagonal ends at the highest ridge


def test_a_roofline_without_calibrated_ceilings_still_places_the_points_and_says_so(tmp_path: Path):
    from kernelkit.report.roofline_plot import build_roofline_figure

    found = roofline.points([square("eager", 1 << 20, 50, calibrated=False), matmul("eager", 1024, 50,
                                                                                  calibrated=False)])
    ax = build_roofline_figure(found, combined=True).axes[0]
    assert "no calibrated ceilings in these results" in ax.get_title()
    assert all(line.get_linestyle() == "None" for line in ax.get_lines())  # points, no roof
    assert sum(len(line.get_xdata()) for line in ax.get_lines()) == 2


def test_html_report_shows_bound_peak_memory_and_its_plot():
    results = sweep()
    page = render_report(RunData(id=3, results=results, command="kernelkit bench softmax"))
    assert "<th>bound</th>" in page and "<th>peak mem</th>" in page and 'id="memory"' in page
    assert page.index("<th>bound</th>") < page.index("<th>% of ceiling</th>") < page.index("<th>peak mem</th>")
    assert "Peak memory against size" in page and "peak memory of one call (MiB)" in page
    assert "compute-bound (ridge at 250 FLOP/byte)" in page  # a roofline point's tooltip
    without = render_report(RunData(id=4, results=[r for r in results if r.op == "square"]))
    assert "<th>peak mem</th>" not in without and 'id="memory"' not in without
    assert math.isfinite(float(page.count("data-impl")))
