"""The HTML report: sections, escaping, size, no network, valid markup, plot and roofline geometry (on fake runs);
a real CPU run rendered from a store; and the page in headless Chromium (its script run, a screenshot)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch

import kernelkit as kk
import pagekit
from kernelkit.measure.measurement import BenchResult
from kernelkit.measure.stats import Ratio, speedup
from kernelkit.report.html import RunData, load_run, render_report, write_report
from kernelkit.report.html_plots import roofline_points
from kernelkit.report.html_tables import repro_command
from kernelkit.results import Status
from kernelkit.store import CaseChange, EnvDiff, RunComparison, RunInfo, Store
from pagekit import Node, parse
from resultkit import H100, bench_result, ceiling_at, even_samples, measurement

COPY_GBPS = 3000.0
PEAKS = {"float32": (51.0, "fp32"), "float16": (750.0, "fp16"), "bfloat16": (750.0, "bf16")}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
SIZES = [(4096, 4096), (256, 256), (1024, 1024)]  # out of order on purpose: plots order sizes by bytes
ENV = {"device_name": H100, "gpu_count": 1, "torch": "2.11.0+cu130", "driver_version": "580.65", "clocks": {"sm": 1980}}
SECTIONS = ("environment", "results", "plots", "roofline", "statuses", "diff")


# --- fake runs ---


def timed(op: str, impl: str, size: tuple[int, ...], dtype: str, seconds: float, nbytes: int, flops: int, *,
          role: str = "impl", n: int = 41, **kw) -> BenchResult:
    """A PASSED result timed at ``seconds`` per call, with its % of the ceilings worked out from the cost model."""
    m = measurement(impl, even_samples(seconds, n=n), mode="cold", first_call=seconds * 50, warmup_calls=10,
                    bytes=nbytes, flops=flops, ceiling=ceiling_at(seconds, nbytes, flops, COPY_GBPS, *PEAKS[dtype]))
    return bench_result(impl, size, dtype, m=m, op=op, role=role, **kw)


def elementwise(op: str, impl: str, size: tuple[int, ...], dtype: str, pct: float, **kw) -> BenchResult:
    """A memory-bound case (read + write one tensor, one FLOP an element) at ``pct`` % of the copy bandwidth."""
    nbytes = 2 * math.prod(size) * ITEMSIZE[dtype]
    return timed(op, impl, size, dtype, nbytes / (pct / 100 * COPY_GBPS * 1e9), nbytes, math.prod(size), **kw)


def matmul(impl: str, n: int, pct: float) -> BenchResult:
    """A compute-bound bf16 n^3 matmul at ``pct`` % of the bf16 ceiling."""
    flops, nbytes = 2 * n**3, 3 * 2 * n * n
    return timed("matmul", impl, (n, n, n), "bfloat16", flops / (pct / 100 * PEAKS["bfloat16"][0] * 1e12), nbytes,
                 flops)


def fake_results() -> list[BenchResult]:
    """square float32 (2 impls, 2 baselines, 3 sizes), softmax float16, a matmul, a failure and a skip."""
    out = []
    for size in SIZES:
        eager = elementwise("square", "eager", size, "float32", 60, role="baseline")
        comp = elementwise("square", "compile", size, "float32", 80, role="baseline")
        for impl, pct in (("triton_flat", 90), ("cuda_vec4", 95)):
            r = elementwise("square", impl, size, "float32", pct)
            r.speedups = {name: speedup(b.measurement.samples, r.measurement.samples) for name, b in
                          (("eager", eager), ("compile", comp))}
            out.append(r)
        out += [eager, comp]
    out += [elementwise("softmax", "triton_online", s, "float16", 70) for s in SIZES[:2]]
    out.append(matmul("triton_mm", 4096, 70))
    out.append(BenchResult("square", "cuda_2d", "cuda", (256, 256), "float32", "cuda", "cold",
                           Status.INCORRECT_NUMERICS, message="not timed: 12 of 65536 elements differ\nat [0, 3]",
                           details={"log": "\n".join(f"worker line {i}" for i in range(40))}))
    out.append(BenchResult("square", "numba_flat", "numba", (256, 256), "float32", "cuda", "cold", Status.SKIPPED,
                           message="numba is not installed"))
    out[0].warnings.append("UserWarning: TF32 is on")
    return out


def fake_run(results: list[BenchResult] | None = None, **kw) -> RunData:
    fields = dict(id=7, results=fake_results() if results is None else results, env=dict(ENV),
                  command="kernelkit bench square softmax matmul --mode cold --json out.json",
                  started="2026-11-23T10:00:00+00:00", finished="2026-11-23T10:05:00+00:00", status="finished",
                  device=H100)
    return RunData(**{**fields, **kw})


def info(run: RunData) -> RunInfo:
    passed = sum(r.status.ok for r in run.results)
    return RunInfo(run.id, run.started, run.finished, run.status, run.command, len(run.results), passed, run.device,
                   "", "cold", run.env)


def fake_comparison(run: RunData) -> RunComparison:
    """Run 6 against ``run``: one case faster, one slower, the rest the same, one only in A; the driver differs."""
    other = fake_run(id=6, env={**ENV, "driver_version": "575.10"})
    changes = []
    for i, r in enumerate(r for r in run.results if r.measurement):
        ratio = [Ratio(1.3, 1.2, 1.4), Ratio(0.8, 0.75, 0.85)][i] if i < 2 else Ratio(1.0, 0.98, 1.02)
        med = r.measurement.median
        changes.append(CaseChange(r.case_id, r.op, r.impl, "x".join(map(str, r.size)), r.dtype, r.mode, "PASSED",
                                  "PASSED", med * ratio.value, med, ratio, ratio.verdict))
    changes.append(CaseChange("square/old_impl/256x256/float32", "square", "old_impl", "256x256", "float32", "cold",
                              "PASSED", None, 1e-5, None, None, None, "only in A"))
    return RunComparison(info(other), info(run), changes, [EnvDiff("driver_version", "575.10", "580.65")])


def results_rows(root: Node) -> list[dict[str, Node]]:
    table = root.all("table", id="results-table")[0]
    heads = [th.full_text() for th in table.all("th")]
    return [dict(zip(heads, tr.all("td"), strict=True)) for tr in table.all("tbody")[0].all("tr")]


# --- unit tests on fake runs ---


def test_every_section_is_there_with_a_row_per_result():
    run = fake_run()
    root = parse(render_report(run, fake_comparison(run)))
    assert [s.attrs["id"] for s in root.all("section")] == list(SECTIONS)
    assert [a.attrs["href"] for a in root.all("nav")[0].all("a")] == [f"#{s}" for s in SECTIONS]
    rows = results_rows(root)
    assert len(rows) == len(run.results)
    assert {r["impl"].full_text() for r in rows} >= {"triton_flat", "cuda_vec4", "eager (baseline)", "cuda_2d"}
    env = root.all("section", id="environment")[0].full_text()
    assert H100 in env and "580.65" in env and '{"sm": 1980}' in env
    # One rate plot per (op, dtype): square float32, softmax float16, matmul bfloat16; one roofline (one device).
    plots = root.all("section", id="plots")[0].all("figcaption")
    assert [p.full_text().split(" · ")[:2] for p in plots] == [["square", "float32"], ["softmax", "float16"],
                                                              ["matmul", "bfloat16"]]
    assert len(root.all("section", id="roofline")[0].all("svg")) == 1
    statuses = root.all("section", id="statuses")[0].full_text()
    assert "INCORRECT_NUMERICS 1" in statuses and "SKIPPED 1" in statuses and "PASSED 15" in statuses
    assert "12 of 65536 elements differ" in statuses and "worker line 39" in statuses
    assert "worker line 19" not in statuses  # only the log's last 20 lines
    assert "numba is not installed" in statuses and "TF32 is on" in statuses


def test_each_row_carries_its_numbers_and_repro_command():
    run = fake_run()
    rows = {(r["impl"].full_text(), r["size"].full_text()): r for r in results_rows(parse(render_report(run)))}
    row = rows[("triton_flat", "1024x1024")]
    seconds = 2 * 1024 * 1024 * 4 / (0.9 * COPY_GBPS * 1e9)
    assert float(row["median"].attrs["data-v"]) == pytest.approx(seconds, rel=1e-6)
    assert row["GB/s"].full_text() == "2700" and row["% of ceiling"].full_text() == "90% bw"
    assert row["vs eager"].full_text().endswith("faster") and "95% CI" in row["vs eager"].attrs["title"]
    assert row["status"].full_text() == "PASSED"
    assert row["repro"].full_text() == ("kernelkit bench square --impl triton_flat --sizes 1024x1024 --dtypes float32 "
                                        "--mode cold --device cuda")
    failed = rows[("cuda_2d", "256x256")]
    assert failed["status"].full_text() == "INCORRECT_NUMERICS" and failed["median"].full_text() == ""
    assert failed["notes"].full_text() == "not timed: 12 of 65536 elements differ"  # first line; all in the title
    assert failed["notes"].attrs["title"] == "not timed: 12 of 65536 elements differ\nat [0, 3]"
    assert "mode" not in rows[("cuda_2d", "256x256")]  # one mode: said in the caption, no column


def test_repro_keeps_the_runs_options_and_drops_output_files():
    r = elementwise("softmax", "triton_online", (64, 48), "float16", 50)
    command = "kernelkit bench --budget 3 softmax --json o.json --graph-warm --sizes=8x8,16x16 -i x --rse 0.01"
    assert repro_command(command, r) == ("kernelkit bench softmax --budget 3 --graph-warm --rse 0.01 "
                                         "--impl triton_online --sizes 64x48 --dtypes float16 --mode cold "
                                         "--device cuda")
    user_file = "kernelkit bench '/home/me/my ops.py' --mode hot"
    assert repro_command(user_file, r).startswith("kernelkit bench '/home/me/my ops.py' --impl triton_online")
    several = "kernelkit bench square softmax --mode hot"
    assert repro_command(several, r).startswith("kernelkit bench softmax --impl triton_online")
    assert repro_command("", r).startswith("kernelkit bench softmax --impl")  # a run started from Python
    assert repro_command("python bench.py", r).startswith("kernelkit bench softmax --impl")


def test_user_strings_are_escaped_everywhere():
    evil_impl = 'x"onmouseover="alert(1)'
    r = elementwise("<b>op</b>", evil_impl, (64, 64), "float32", 50)
    bad = BenchResult("<b>op</b>", "<i>impl</i>", "cuda", (8,), "float32", "cuda", "cold", Status.RUNTIME_ERROR,
                      message='<script>alert("pwned")</script>')
    run = fake_run([r, bad], env={"gpu_name": '"><img src=x onerror=alert(1)>'},
                   command="kernelkit bench x --note '</code><script>bad()</script>'")
    text = render_report(run)
    root = parse(text)
    assert len(root.all("script")) == 1 and root.all("img") == []  # ours only
    assert "<script>alert" not in text and "<b>op" not in text and "<img" not in text
    everything = [n for tag in ("td", "circle", "g", "svg", "pre", "code") for n in root.all(tag)]
    assert not any(k.startswith("on") for n in everything for k in n.attrs)
    assert {g.attrs["data-impl"] for g in root.all("g", "impl")} == {evil_impl}
    assert '<script>alert("pwned")</script>' in root.all("section", id="statuses")[0].full_text()
    assert "</code><script>bad()</script>" in root.all("header")[0].full_text()


def test_nothing_is_fetched_from_the_network():
    run = fake_run()
    text = render_report(run, fake_comparison(run))
    assert "http://" not in text and "https://" not in text
    assert "url(" not in text and "@import" not in text
    root = parse(text)
    csp = [m.attrs["content"] for m in root.all("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]
    linked = [n for tag in ("a", "link", "script", "img", "image", "use", "iframe") for n in root.all(tag)
              if any(n.attrs.get(k) for k in ("src", "href", "xlink:href"))]
    assert all(n.attrs.get("href", "").startswith("#") for n in linked)


def test_a_full_sweep_of_600_results_stays_under_5_mb_without_raw_samples():
    results = []
    for op in ("square", "softmax", "gelu", "gelu_erf", "bias_gelu"):
        for k in range(10):
            size = (256 * (k + 1), 1000 + k)
            for dtype in ("float32", "float16", "bfloat16"):
                results += [elementwise(op, impl, size, dtype, pct, n=500)
                            for impl, pct in (("triton_a", 90), ("cuda_b", 80), ("eager", 50), ("compile", 60))]
    assert len(results) == 600
    run = fake_run(results)
    started = time.perf_counter()
    text = render_report(run, fake_comparison(run))
    elapsed = time.perf_counter() - started
    size = len(text.encode())
    assert size < 5_000_000, f"{size / 1e6:.1f} MB"
    assert elapsed < 20
    one = results[0].measurement.samples
    assert repr(one[1]) not in text and f"{one[1]:.9g}" not in text  # a raw sample: never on the page
    root = parse(text)
    assert len(results_rows(root)) == 600 and len(root.all("circle", "pt")) == 2 * 600  # rate plots + roofline
    assert len(root.all("figure")) == 5 * 3 + 1


def test_rate_plot_has_a_line_per_impl_ordered_by_size_with_band_and_ceiling():
    root = parse(render_report(fake_run()))
    fig = next(f for f in root.all("figure") if f.all("figcaption")[0].full_text().startswith("square · float32"))
    impls = {g.attrs["data-impl"]: g for g in fig.all("g", "impl")}
    assert set(impls) == {"triton_flat", "cuda_vec4", "eager", "compile"}
    points = impls["triton_flat"].all("circle", "pt")
    assert [float(p.attrs["data-value"]) for p in points] == pytest.approx([2700.0] * 3)
    assert [float(p.attrs["cx"]) for p in points] == sorted(float(p.attrs["cx"]) for p in points)
    assert "256x256" in points[0].all("title")[0].full_text()  # the smallest size comes first
    assert impls["triton_flat"].all("polygon", "band") and impls["triton_flat"].all("polyline", "series")
    assert impls["eager"].all("polyline", "baseline") and not impls["cuda_vec4"].all("polyline", "baseline")
    assert "copy ceiling 3000 GB/s (calibrated)" in fig.full_text()
    assert {g.attrs["data-impl"] for g in fig.all("g", "legend")} == set(impls)
    # The ceiling line sits above every point: the 95% impl's points are the highest (smallest y).
    ceiling_y = float(fig.all("line", "ceiling")[0].attrs["y1"])
    top = min(float(p.attrs["cy"]) for p in impls["cuda_vec4"].all("circle", "pt"))
    assert ceiling_y < top == pytest.approx(min(float(c.attrs["cy"]) for c in fig.all("circle", "pt")))


def _roof_y(polylines: list[Node], cx: float) -> list[float]:
    """The y of each roof polyline at x = cx (straight segments in pixels: the axes are log-log)."""
    out = []
    for line in polylines:
        pts = [tuple(map(float, p.split(","))) for p in line.attrs["points"].split()]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
            if x0 <= cx <= x1 and x1 > x0:
                out.append(y0 + (y1 - y0) * (cx - x0) / (x1 - x0))
                break
    return out


def test_roofline_points_sit_at_intensity_and_achieved_rate_under_the_right_roof():
    on_bw = elementwise("square", "cuda_vec4", (1024, 1024), "float32", 100)
    half_bw = elementwise("square", "triton_flat", (1024, 1024), "float32", 50)
    on_peak, mm70 = matmul("cublas", 4096, 100), matmul("triton_mm", 4096, 70)
    points = {p.result.impl: p for p in roofline_points([on_bw, half_bw, on_peak, mm70])}
    assert points["cuda_vec4"].ai == pytest.approx(0.125)  # 1 FLOP per 8 bytes (fp32 read + write)
    assert points["cuda_vec4"].achieved == pytest.approx(COPY_GBPS * 0.125 / 1e3)
    assert points["triton_flat"].roof == pytest.approx(COPY_GBPS * 0.125 / 1e3)
    assert points["triton_flat"].achieved == pytest.approx(COPY_GBPS * 0.125 / 1e3 / 2)
    assert points["triton_mm"].ai == pytest.approx(2 * 4096 / 6)
    assert points["triton_mm"].roof == pytest.approx(750.0) and points["triton_mm"].achieved == pytest.approx(525.0)

    fig = parse(render_report(fake_run([on_bw, half_bw, on_peak, mm70]))).all("section", id="roofline")[0]
    circles = {c.attrs["data-impl"]: c for c in fig.all("circle", "pt")}
    for impl, p in points.items():
        assert float(circles[impl].attrs["data-ai"]) == pytest.approx(p.ai, rel=1e-5)
        assert float(circles[impl].attrs["data-tflops"]) == pytest.approx(p.achieved, rel=1e-5)
        assert float(circles[impl].attrs["data-roof"]) == pytest.approx(p.roof, rel=1e-5)
    roofs = fig.all("polyline", "roof")
    assert len(roofs) == 2  # fp32 and bf16 compute ceilings, each under the same bandwidth diagonal

    def xy(impl):
        return float(circles[impl].attrs["cx"]), float(circles[impl].attrs["cy"])

    for impl in ("cuda_vec4", "cublas"):  # at 100% of their roof: on a roof line
        cx, cy = xy(impl)
        assert min(abs(cy - y) for y in _roof_y(roofs, cx)) < 0.05, impl
    for impl in ("triton_flat", "triton_mm"):  # under their roof: lower on screen (a larger y)
        cx, cy = xy(impl)
        assert cy > min(_roof_y(roofs, cx)) + 5, impl
    assert xy("cuda_vec4")[0] == xy("triton_flat")[0] < xy("cublas")[0]  # same intensity, same x
    # 50% of the roof is log10(2) decades below it; 70% is log10(1/0.7): the gaps keep that ratio.
    gap_bw = xy("triton_flat")[1] - xy("cuda_vec4")[1]
    gap_mm = xy("triton_mm")[1] - xy("cublas")[1]
    assert gap_mm / gap_bw == pytest.approx(math.log10(1 / 0.7) / math.log10(2), rel=1e-3)
    text = fig.full_text()
    assert "bf16 750 TFLOP/s (calibrated)" in text and "fp32 51 TFLOP/s (calibrated)" in text
    assert "3 TB/s copy (calibrated)" in text


def test_diff_section_shows_verdicts_and_environment_differences():
    run = fake_run()
    root = parse(render_report(run, fake_comparison(run)))
    diff = root.all("section", id="diff")[0]
    assert diff.all("h2")[0].full_text() == "Against run 6"
    rows = diff.all("table", id="diff-table")[0].all("tbody")[0].all("tr")
    verdicts = [tr.all("td")[8].full_text() for tr in rows]
    assert verdicts[:2] == ["faster", "slower"] and set(verdicts[2:-1]) == {"same"} and verdicts[-1] == "-"
    assert rows[-1].all("td")[9].full_text() == "only in A"
    assert [tr.all("td")[8].attrs["class"] for tr in rows[:2]] == ["v-faster", "v-slower"]
    text = diff.full_text()
    assert "environments differ" in text and "575.10" in text and "580.65" in text
    assert "faster 1" in text and "slower 1" in text and "not compared 1" in text


def test_a_run_with_nothing_timed_still_renders():
    skipped = BenchResult("square", "cuda_2d", "cuda", (8,), "float32", "cpu", "hot", Status.SKIPPED, message="no GPU")
    root = parse(render_report(fake_run([skipped], env={})))
    assert "no timed results" in root.all("section", id="plots")[0].full_text()
    assert "no environment recorded" in root.all("section", id="environment")[0].full_text()
    assert parse(render_report(fake_run([])))  # an empty run too


def test_write_report_reads_runs_and_the_comparison_from_a_store(tmp_path: Path):
    results = fake_results()[:4]
    with Store.open(tmp_path / "results.sqlite") as store:
        for _ in range(2):
            run_id = store.begin_run("kernelkit bench square", ENV, op="square", mode="cold")
            for r in results:
                store.add_result(run_id, r)
            store.finish_run(run_id)
        path = write_report(store, "latest", 1, tmp_path / "out" / "report.html")
        loaded = load_run(store, -1)
    assert loaded.id == 2 and len(loaded.results) == 4 and loaded.env["device_name"] == H100
    root = parse(path.read_text(encoding="utf-8"))
    assert root.all("section", id="diff")[0].all("h2")[0].full_text() == "Against run 1"
    verdicts = {tr.all("td")[8].full_text() for tr in root.all("table", id="diff-table")[0].all("tbody")[0].all("tr")}
    assert verdicts == {"same"}  # identical samples: no change


# --- end to end: a real CPU run ---


@pytest.mark.slow
def test_a_real_cpu_run_renders_from_the_store(tmp_path: Path):
    with Store.open(tmp_path / "results.sqlite") as store:
        # Three contenders keep it short: a Triton impl (interpreted), a CUDA one (compiled, then skipped), eager.
        report = kk.bench_op("square", impls=["triton_flat", "cuda_2d", "eager"], device="cpu", sizes=[(64, 48)],
                             dtypes=[torch.float32], mode="hot", budget=0.2, store=store,
                             command="kernelkit bench square --sizes 64x48 --device cpu")
        path = write_report(store, report.run_id, report.run_id, tmp_path / "report.html")
    text = path.read_text(encoding="utf-8")
    root = parse(text)
    rows = results_rows(root)
    timed_results = [r for r in report.results if r.measurement and r.measurement.samples]
    assert len(rows) == len(report.results) == 3 and len(timed_results) == 2
    assert {r["status"].full_text() for r in rows} == {"PASSED", "SKIPPED"}
    flat = next(r for r in rows if r["impl"].full_text() == "triton_flat")
    assert flat["vs eager"].full_text().endswith(("faster", "slower", "~"))
    assert {r["impl"].full_text().removesuffix(" (baseline)") for r in rows} == {r.impl for r in report.results}
    assert all(r["repro"].full_text().startswith("kernelkit bench square --impl ") for r in rows)
    assert "CPU timings: not GPU performance" in root.all("section", id="results")[0].full_text()
    assert len(root.all("section", id="plots")[0].all("circle", "pt")) == len(timed_results)
    assert len(root.all("section", id="roofline")[0].all("circle", "pt")) == len(timed_results)
    verdicts = {tr.all("td")[8].full_text() for tr in root.all("table", id="diff-table")[0].all("tbody")[0].all("tr")}
    assert verdicts <= {"same", "-"}  # the run against itself
    assert "http://" not in text and "https://" not in text


# --- in a real browser ---

PROBE = """<script>
(function () {
  function rect(el) { var r = el.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; }
  var out = {ready: document.body.getAttribute("data-kk-ready")};
  var table = document.getElementById("results-table");
  out.table = rect(table);
  out.plot = rect(document.querySelector("#plots svg.plot"));
  out.toggles = document.querySelectorAll("input[data-impl-toggle]").length;
  out.titlesLeft = document.querySelectorAll("svg .pt > title").length;
  out.tips = document.querySelectorAll("svg .pt[data-tip]").length;
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var col = heads.findIndex(function (th) { return th.textContent === "median"; });
  function column() {
    var rows = table.tBodies[0].rows;
    return Array.prototype.map.call(rows, function (r) { return r.cells[col].getAttribute("data-v"); });
  }
  heads[col].click(); out.ascending = column();
  heads[col].click(); out.descending = column();
  document.querySelector('input[data-impl-toggle="triton_flat"]').click();
  var groups = Array.prototype.slice.call(document.querySelectorAll("#plots svg g.impl"));
  function shown(g) { return getComputedStyle(g).display !== "none"; }
  function flat(g) { return g.getAttribute("data-impl") === "triton_flat"; }
  out.flatShown = groups.filter(function (g) { return flat(g) && shown(g); }).length;
  out.othersShown = groups.filter(function (g) { return !flat(g) && shown(g); }).length;
  var pt = document.querySelector("#roofline svg .pt");
  pt.dispatchEvent(new MouseEvent("mouseover", {bubbles: true, clientX: 50, clientY: 50}));
  var tip = document.getElementById("kk-tip");
  out.tip = tip.hidden ? null : tip.textContent;
  var filter = document.querySelector('input.filter[data-table="results-table"]');
  filter.value = "softmax";
  filter.dispatchEvent(new Event("input"));
  out.visible = Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return !r.hidden; }).length;
  document.body.setAttribute("data-probe", JSON.stringify(out));
})();
</script>"""


@pytest.mark.slow
def test_the_page_runs_and_renders_in_headless_chromium(tmp_path: Path):
    if pagekit.find_chromium() is None:
        pytest.skip(pagekit.MISSING)
    image = pytest.importorskip("PIL.Image", reason="the screenshot is read with Pillow (comes with matplotlib)")
    run = fake_run()
    page = tmp_path / "report.html"
    page.write_text(render_report(run, fake_comparison(run)), encoding="utf-8")
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")

    body = parse(pagekit.dump_dom(probed, tmp_path)).all("body")[0]
    probe = json.loads(body.attrs["data-probe"])
    assert probe["ready"] == f"4 plots, 3 tables, 6 impls, {2 * 15} points"  # tables: results, failures, diff
    assert probe["toggles"] == 6 and probe["titlesLeft"] == 0 and probe["tips"] == 2 * 15
    medians = [float(v) for v in probe["ascending"] if v]
    assert medians == sorted(medians) and probe["ascending"][-2:] == ["", ""]  # untimed rows last
    assert [float(v) for v in probe["descending"] if v] == sorted(medians, reverse=True)
    assert probe["flatShown"] == 0 and probe["othersShown"] == 3 + 1 + 1  # square's 3 others, softmax, matmul
    assert probe["tip"].startswith("square · ") and "FLOP/byte" in probe["tip"]
    assert probe["visible"] == 2  # the two softmax rows

    shot = image.open(pagekit.screenshot(page, tmp_path / "report.png", tmp_path)).convert("RGB")
    assert shot.size == pagekit.WINDOW

    def region(box):
        left, top, width, height = (int(v) for v in box)
        assert top + height <= shot.size[1], f"{box} is below the screenshot"
        return shot.crop((left, top, left + width, top + height))

    table = pixels(region(probe["table"]))
    assert sum(max(px) < 110 for px in table) > 0.01 * len(table)  # text
    plot = pixels(region(probe["plot"]))
    assert sum(max(px) - min(px) > 80 for px in plot) > 500  # coloured: lines, bands, points


def pixels(image) -> list[tuple[int, int, int]]:
    """The RGB pixels of a PIL image, row by row."""
    data = image.tobytes()
    return list(zip(data[0::3], data[1::3], data[2::3], strict=True))
