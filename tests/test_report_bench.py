"""Report views of benchmark results: JSON/CSV export, plots, and the terminal table, on synthetic results."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kernelkit.errors import BackendUnavailable
from kernelkit.measure.measurement import BenchResult, Ceiling, Measurement
from kernelkit.measure.stats import speedup
from kernelkit.report import bench_table as bt
from kernelkit.report import export, plot
from kernelkit.results import Status
from resultkit import H100, bench_result, even_samples, measurement, render

COPY_GBPS = 3012.0
SIZES = [(4096, 4096), (256, 256), (1024, 1024)]  # out of order on purpose: views sort by bytes


def measured(seconds: float, *, nbytes: int | None = None, flops: int | None = None, ceiling: Ceiling | None = None,
             device: str = "cuda", spread: float = 0.02, **kw) -> Measurement:
    return measurement("x", even_samples(seconds, spread), device=device,
                       device_name=H100 if device == "cuda" else "cpu", first_call=seconds * 100, warmup_calls=10,
                       bytes=nbytes, flops=flops, ceiling=ceiling, **kw)


def square_case(size, gbps: float, dtype="float32", device="cuda", spread=0.02) -> Measurement:
    """A memory-bound square at ``gbps``: read + write one tensor of ``size``."""
    nbytes = 2 * math.prod(size) * (4 if dtype == "float32" else 2)
    ceiling = Ceiling(bandwidth_gbps=COPY_GBPS, pct_bandwidth=100 * gbps / COPY_GBPS)
    return measured(nbytes / gbps / 1e9, nbytes=nbytes, ceiling=ceiling, device=device, spread=spread)


def bench_results() -> list[BenchResult]:
    """square float32 (3 impls at 3 sizes), square float16 (one impl), a compute-bound matmul, a failure, a skip."""
    out = []
    for size in SIZES:
        eager, tri, comp = square_case(size, 1500), square_case(size, 2500), square_case(size, 2000)
        out += [
            bench_result("eager", size, m=eager),
            bench_result("triton_flat", size, m=tri, speedups={"eager": speedup(eager.samples, tri.samples),
                                                              "compile": speedup(comp.samples, tri.samples)}),
            bench_result("compile", size, m=comp, role="baseline",
                         speedups={"eager": speedup(eager.samples, comp.samples)}),
        ]
    out += [bench_result("triton_flat", s, "float16", m=square_case(s, 2400, "float16")) for s in SIZES[:2]]
    mm_ceiling = Ceiling(COPY_GBPS, 746.0, "bf16", pct_bandwidth=20.0, pct_flops=70.0)
    out.append(bench_result("triton_mm", (4096, 4096, 4096), "bfloat16", op="matmul",
                      m=measured(2 * 4096**3 / 522e12, nbytes=3 * 2 * 4096**2, flops=2 * 4096**3,
                                    ceiling=mm_ceiling)))
    out.append(bench_result("cuda_vec4", (256, 256), status=Status.INCORRECT_NUMERICS,
                      message="12 of 65536 elements differ; [0, 3]: got 1\nfirst mismatches: ..."))
    out.append(bench_result("numba_flat", (256, 256), status=Status.SKIPPED, message="numba is not installed"))
    return out


# --- export ---


def test_json_roundtrips_every_result_with_raw_samples(tmp_path: Path):
    results = bench_results()
    path = export.write_json(results, tmp_path / "sub" / "run.json", env={"gpu": "H100"}, command="kernelkit bench")
    doc = json.loads(path.read_text())
    assert (doc["command"], doc["env"], len(doc["results"])) == ("kernelkit bench", {"gpu": "H100"}, len(results))
    assert doc["results"][0]["measurement"]["samples"] == results[0].measurement.samples
    loaded, _ = export.read_json(path)
    assert [r.to_dict() for r in loaded] == [r.to_dict() for r in results]
    assert [BenchResult.from_dict(d).to_dict() for d in doc["results"]] == [r.to_dict() for r in results]


def test_json_is_strict_when_a_statistic_is_undefined(tmp_path: Path):
    two = bench_result("eager", m=Measurement("x", "hot", "cpu", "cpu", [1e-3, 2e-3], 1e-2, 1, "budget"))
    assert math.isinf(two.measurement.stats.rse)  # 2 samples: no standard error

    def refuse(name: str):
        raise AssertionError(f"non-standard JSON constant {name}")

    doc = json.loads(export.write_json([two], tmp_path / "r.json").read_text(), parse_constant=refuse)
    assert doc["results"][0]["measurement"]["stats"]["rse"] is None
    assert export.read_json(tmp_path / "r.json")[0][0].measurement.samples == [1e-3, 2e-3]


def test_csv_has_one_row_per_result_failed_ones_included(tmp_path: Path):
    results = bench_results()
    with export.write_csv(results, tmp_path / "run.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == export.CSV_COLUMNS
        rows = list(reader)
    assert len(rows) == len(results)
    by_case = {row["case"]: row for row in rows}

    tri = next(r for r in results if r.impl == "triton_flat" and r.size == (4096, 4096) and r.dtype == "float32")
    row = by_case[tri.case_id]
    s = tri.measurement.stats
    assert (row["size"], row["status"], row["role"], row["n"]) == ("4096x4096", "PASSED", "impl", "41")
    assert float(row["median_s"]) == s.median and float(row["p20_s"]) == s.p20 and float(row["p80_s"]) == s.p80
    assert float(row["gbps"]) == pytest.approx(2500)
    assert float(row["pct_bandwidth"]) == pytest.approx(100 * 2500 / COPY_GBPS)
    assert float(row["speedup_vs_eager"]) == pytest.approx(2500 / 1500)
    assert row["verdict_vs_eager"] == "faster" and float(row["ci_low_vs_eager"]) > 1
    assert float(row["speedup_vs_compile"]) == pytest.approx(2500 / 2000) and row["verdict_vs_compile"] == "faster"
    assert (row["suspect"], row["stop_reason"], row["dropped"]) == ("false", "converged", "0")

    failed = by_case["square/cuda_vec4/256x256/float32"]
    assert failed["status"] == "INCORRECT_NUMERICS" and failed["message"].startswith("12 of 65536")
    assert all(failed[c] == "" for c in ("n", "median_s", "gbps", "speedup_vs_eager", "suspect"))
    assert by_case["square/numba_flat/256x256/float32"]["status"] == "SKIPPED"


# --- plots ---


def test_plot_writes_one_png_and_svg_per_op_and_dtype(tmp_path: Path):
    paths = plot.plot_results(bench_results(), tmp_path)
    # the matmul alone has both bytes and FLOPs: its roofline too (tests/test_report_roofline.py covers those)
    stems = {"square_float32_hot", "square_float16_hot", "matmul_bfloat16_hot", "matmul_bfloat16_hot_roofline"}
    assert sorted(p.name for p in paths) == sorted(f"{s}.{ext}" for s in stems for ext in ("png", "svg"))
    assert all(p.exists() and p.parent == tmp_path for p in paths)
    assert (tmp_path / "square_float32_hot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    svg = (tmp_path / "square_float32_hot.svg").read_text()
    ET.fromstring(svg)  # well-formed
    for text in ("copy ceiling 3012 GB/s (calibrated)", "triton_flat", "eager (baseline)", "compile (baseline)",
                 "4096x4096", "NVIDIA H100 80GB HBM3"):
        assert text in svg
    assert "bf16 matmul ceiling 746 TFLOP/s (calibrated)" in (tmp_path / "matmul_bfloat16_hot.svg").read_text()


def test_plot_keeps_devices_apart(tmp_path: Path):
    cpu = [bench_result("eager", s, m=square_case(s, 20, device="cpu"), device="cpu") for s in SIZES]
    cuda = [r for r in bench_results() if r.op == "square" and r.dtype == "float32"]
    names = {p.name for p in plot.plot_results(cuda + cpu, tmp_path)}
    assert names == {f"square_float32_hot_{d}.{ext}" for d in ("cpu", "cuda") for ext in ("png", "svg")}


def test_plot_skips_results_without_measurement(tmp_path: Path):
    failed = [r for r in bench_results() if r.measurement is None]
    assert failed and plot.plot_results(failed, tmp_path) == []


def test_figure_has_a_line_and_band_per_impl_baselines_dashed_and_the_ceiling():
    results = [r for r in bench_results() if r.op == "square" and r.dtype == "float32"]
    ax = plot.build_figure(results).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"eager (baseline)", "triton_flat", "compile (baseline)",
                          "copy ceiling 3012 GB/s (calibrated)"}
    assert lines["triton_flat"].get_linestyle() == "-"
    assert lines["eager (baseline)"].get_linestyle() == "--" and lines["compile (baseline)"].get_linestyle() == "--"
    assert set(lines["copy ceiling 3012 GB/s (calibrated)"].get_ydata()) == {COPY_GBPS}
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256x256", "1024x1024", "4096x4096"]
    assert list(lines["triton_flat"].get_xdata()) == [0, 1, 2]
    assert list(lines["triton_flat"].get_ydata()) == pytest.approx([2500] * 3)
    assert "GB/s" in ax.get_ylabel()

    bands = {c.get_label(): c for c in ax.collections}
    assert set(bands) == {"_eager p20-p80", "_triton_flat p20-p80", "_compile p20-p80"}
    ys = bands["_triton_flat p20-p80"].get_paths()[0].vertices[:, 1]
    # samples span +-2%: p20/p80 at -+1.2%, so the band runs from the rate at p80 time to the rate at p20 time
    assert min(ys) == pytest.approx(2500 / 1.012) and max(ys) == pytest.approx(2500 / 0.988)


def test_figure_shows_tflops_for_compute_bound_ops_and_says_cpu_timings():
    mm = [r for r in bench_results() if r.op == "matmul"]
    ax = plot.build_figure(mm).axes[0]
    assert "TFLOP/s" in ax.get_ylabel()
    assert ax.get_lines()[0].get_ydata()[0] == pytest.approx(522)

    cpu = [bench_result("eager", s, m=square_case(s, 20, device="cpu"), device="cpu") for s in SIZES]
    title = plot.build_figure(cpu).axes[0].get_title()
    assert "square" in title and "float32" in title and "hot" in title and "CPU timings" in title
    assert "CPU timings" not in plot.build_figure(mm).axes[0].get_title()


def test_metric_choice_follows_the_closer_ceiling():
    memory_bound = bench_result("x", m=measured(1e-3, nbytes=10**9, flops=10**9,
                                             ceiling=Ceiling(COPY_GBPS, 50.0, pct_bandwidth=33.0, pct_flops=2.0)))
    assert plot.choose_metric([memory_bound]) is plot.GBPS
    assert plot.choose_metric([bench_result("x", m=measured(1e-3, flops=10**9))]) is plot.TFLOPS
    assert plot.choose_metric([bench_result("x", m=measured(1e-3))]) is plot.TIME


def test_given_ceilings_fill_in_for_results_without_one():
    uncalibrated = [bench_result("eager", s, m=measured(1e-3, nbytes=math.prod(s) * 8)) for s in SIZES]
    assert len(plot.build_figure(uncalibrated).axes[0].get_lines()) == 1
    given = plot.build_figure(uncalibrated, ceilings={"float32": Ceiling(bandwidth_gbps=2000.0)})
    assert "copy ceiling 2000 GB/s (calibrated)" in [line.get_label() for line in given.axes[0].get_lines()]


def test_plot_without_matplotlib_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    with pytest.raises(BackendUnavailable, match=r"kernelkit\[plot\]"):
        plot.plot_results(bench_results(), tmp_path)


@pytest.mark.slow  # a fresh interpreter, ~2 s
def test_report_modules_import_without_matplotlib_or_side_effects():
    code = ("import sys, kernelkit.report.plot, kernelkit.report.export, kernelkit.report.bench_table; "
            "assert 'matplotlib' not in sys.modules")
    src = Path(__file__).resolve().parents[1] / "src"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(src)})


# --- terminal table ---


def test_table_rows_verdicts_and_failed_messages():
    results = bench_results()
    text = render(bt.bench_table([r for r in results if r.op == "square"]))
    lines = text.splitlines()
    tri = next(line for line in lines if "triton_flat" in line and "4096x4096" in line and "float32" in line)
    assert "1.67x faster" in tri and "1.25x faster" in tri and "2500" in tri and "83% bw" in tri and "41" in tri
    assert "±1.2%" in tri and "µs" in tri
    assert any("eager (baseline)" in line for line in lines)
    failed = next(line for line in lines if "cuda_vec4" in line)
    assert "INCORRECT_NUMERICS" in failed and "12 of 65536 elements differ; [0, 3]: got 1" in failed
    assert "first mismatches" not in text  # only the message's first line
    assert "numba is not installed" in text
    assert "hot mode" in text and "median of n" in text and "NVIDIA H100 80GB HBM3" in text
    assert "CPU timings" not in text
    # grouped by (size, dtype), sizes ascending
    order = [next(i for i, line in enumerate(lines) if f" {s} " in line) for s in ("256x256", "1024x1024", "4096x4096")]
    assert order == sorted(order)


def test_table_verdicts_slower_and_same_with_ci():
    base = square_case((256, 256), 2000)
    slow, same = square_case((256, 256), 1800, spread=0.01), square_case((256, 256), 2000)
    table = bt.bench_table([
        bench_result("eager", m=base),
        bench_result("triton_slow", m=slow, speedups={"eager": speedup(base.samples, slow.samples)}),
        bench_result("triton_same", m=same, speedups={"eager": speedup(base.samples, same.samples)}),
    ], show_ci=True)
    text = render(table)
    assert "0.90x slower [" in text and "1.00x ~ [" in text
    assert bt.speedup_text(speedup(base.samples, slow.samples)).startswith("[red]")
    assert bt.speedup_text(speedup(slow.samples, base.samples)).startswith("[green]1.11x faster")


def test_table_flags_suspect_rates_and_explains_doubtful_rows():
    ceiling = Ceiling(bandwidth_gbps=COPY_GBPS, pct_bandwidth=134.0)
    m = measured(1e-5, nbytes=40_000_000, ceiling=ceiling, stop_reason="budget", spread=0.2,
                    clocks_mhz=[1500.0] * 41, max_clock_mhz=1980.0, warnings=["a", "b"], dropped=3)
    text = render(bt.bench_table([bench_result("cuda_skip", m=m)]))
    assert "SUSPECT 134% bw" in text
    assert bt.ceiling_text(m) == "[bold red]SUSPECT 134% bw[/]"
    assert "stopped: budget" in text
    assert bt.notes_text(m) == "stopped: budget; noisy: IQR 20% of median; clocks at 76% of max; 3 dropped; 2 warnings"
    assert "message" not in text.splitlines()[1]  # all passed: no message column


def test_table_caption_says_cpu_timings():
    cpu = [bench_result("eager", s, m=square_case(s, 20, device="cpu"), device="cpu") for s in SIZES]
    assert "CPU timings: not GPU performance" in render(bt.bench_table(cpu))


@pytest.mark.parametrize("seconds, text", [
    (8.5e-7, "850 ns"), (1.2e-6, "1.20 µs"), (12.34e-6, "12.3 µs"), (999.7e-6, "1.00 ms"), (1.234e-3, "1.23 ms"),
    (0.25, "250 ms"), (4.56, "4.56 s"), (None, ""), (math.inf, ""),
])
def test_format_time(seconds, text):
    assert bt.format_time(seconds) == text
