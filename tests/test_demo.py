"""`kernelkit demo`: one real CPU run (shared by the slow tests), and the step guard with fake steps (fast)."""

import io
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kernelkit import demo
from kernelkit.cli import app
from kernelkit.demo import matmul as demo_matmul
from kernelkit.demo import steps as demo_steps
from kernelkit.demo.steps import Outcome
from kernelkit.measure.measurement import BenchResult, Ceiling, Measurement
from kernelkit.measure.stats import speedup
from kernelkit.results import Status
from kernelkit.runs import bench as sweep
from kernelkit.runs.bench import SweepReport
from kernelkit.target import open_target
from resultkit import even_samples, measurement

TITLES = [step.title for step in demo.tour()]


@pytest.fixture(scope="module")
def cpu_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path]:
    """The whole demo on the CPU, once: (exit code, everything it printed, its output folder)."""
    out_dir = tmp_path_factory.mktemp("demo")
    buffer = io.StringIO()
    code = demo.run_demo(Console(file=buffer, width=160), device="cpu", out_dir=out_dir)
    return code, buffer.getvalue(), out_dir


@pytest.mark.slow
def test_cpu_demo_runs_every_step_and_exits_0(cpu_demo):
    code, text, _ = cpu_demo
    assert code == 0, text
    for number, title in enumerate(TITLES, 1):
        assert f"{number}. {title}" in text
    assert "Summary" in text and "Go further" in text and "kernelkit bench square" in text
    assert "0 failed" in text


@pytest.mark.slow
def test_cpu_demo_labels_cpu_timings_and_says_why_gpu_steps_skip(cpu_demo):
    _, text, out_dir = cpu_demo
    assert "CPU timings (not GPU performance)" in text  # step 1's table
    assert "no asynchrony to show" in text
    assert "CPU timings: not GPU performance" in text  # the bench tables' caption
    assert "no GPU; it compiled" in text  # CUDA C++ impls: built with NVRTC, then SKIPPED
    assert "skipped: no GPU: Nsight Compute" in text
    assert "SKIPPED" in text and "PASSED" in text


@pytest.mark.slow
def test_cpu_demo_shows_the_evidence_of_each_step(cpu_demo):
    _, text, out_dir = cpu_demo
    assert "kk.bench, cold mode" in text and "stopped:" in text
    assert "square: 64x48, 33x17, 1x257; float32" in text  # the check tables
    bench = text.split("3. Benchmark")[1].split("4. The matmul")[0]
    for impl in ("triton_flat", "numba_flat", "triton_online", "compile", "eager"):
        assert f"│ {impl} " in bench  # the compact bench tables: impls that run on the CPU, and both baselines
    assert "cuda_vec4 " not in text.split("3. Benchmark")[1].split("4. The matmul")[0]  # CUDA C++ is not benched
    assert "% of ceiling" in text
    assert "profile square/eager/64x48/float32 on cpu" in text
    assert list((out_dir / "profile").glob("*.trace.json"))
    assert "square/cuda_vec4/4096x4096/float32 compiled for sm_90" in text
    assert "128-bit" in text


@pytest.mark.slow
def test_cpu_demo_matmul_step_times_the_interpreter_and_compiles_every_rung(cpu_demo):
    _, text, _ = cpu_demo
    step = text.split("4. The matmul ladder")[1].split("5. Where the time goes")[0]
    assert "matmul 33x29x17 fp32" in step and "% of eager" in step and "CPU timings: not GPU performance" in step
    row = next(line for line in step.splitlines() if line.startswith("│ triton_blocked"))  # timed: median and %
    assert " ms" in row and "%" in row
    assert "eager (baseline)" in step and "100.0%" in step
    for rung in demo_matmul.RUNGS:
        assert f"skipped {rung} (float32): no GPU; it compiled: matmul_{rung.removeprefix('cuda_')}_kernel" in step
    assert "TIMEOUT" not in step and "CRASHED" not in step
    row = next(line for line in text.split("Summary")[1].splitlines() if "4. The matmul" in line)
    assert " ok " in row and "triton_blocked timed in the" in row  # the note, as far as its column shows it


def _fake_steps(monkeypatch: pytest.MonkeyPatch, ran: list[str], **replace: object) -> None:
    """Every step replaced by one that records its name and prints a marker, unless given in ``replace``."""
    for name in ("timing_step", "check_step", "bench_step", "matmul_step", "profile_step", "asm_step", "ncu_step"):
        def fake(ctx: demo_steps.DemoContext, name: str = name) -> Outcome:
            ran.append(name)
            ctx.console.print(f"evidence of {name}")
            return Outcome("ok", f"{name} done")

        module = demo_matmul if name == "matmul_step" else demo_steps
        monkeypatch.setattr(module, name, replace.get(name, fake))


def test_a_step_that_raises_is_reported_and_the_others_still_run(monkeypatch):
    def broken(ctx):
        raise RuntimeError("the bench broke")

    ran: list[str] = []
    _fake_steps(monkeypatch, ran, bench_step=broken)
    result = CliRunner().invoke(app, ["demo", "--device", "cpu"])
    assert result.exit_code == 1, result.output
    assert "step 3 failed: RuntimeError: the bench broke" in result.output
    assert ran == ["timing_step", "check_step", "matmul_step", "profile_step", "asm_step", "ncu_step"]
    assert "evidence of ncu_step" in result.output
    assert "FAILED" in result.output and "6 ok, 0 skipped, 1 failed" in result.output


@pytest.mark.parametrize(("status", "code"), [("skipped", 0), ("failed", 1)])
def test_skipped_steps_do_not_fail_the_demo_failed_ones_do(monkeypatch, status, code):
    ran: list[str] = []
    _fake_steps(monkeypatch, ran, ncu_step=lambda ctx: Outcome(status, "no ncu here"))
    buffer = io.StringIO()
    assert demo.run_demo(Console(file=buffer, width=160), device="cpu") == code
    assert "no ncu here" in buffer.getvalue()


def test_an_interrupt_stops_the_demo_with_the_summary_and_130(monkeypatch):
    def interrupted(ctx):
        raise KeyboardInterrupt

    ran: list[str] = []
    _fake_steps(monkeypatch, ran, check_step=interrupted)
    buffer = io.StringIO()
    assert demo.run_demo(Console(file=buffer, width=160), device="cpu") == 130
    assert ran == ["timing_step"]
    assert "(interrupted)" in buffer.getvalue()


def test_bad_arguments_exit_2():
    result = CliRunner().invoke(app, ["demo", "--device", "cpu", "--timeout", "0"])
    assert result.exit_code == 2
    assert "--timeout must be positive" in result.output


def test_the_cpu_bench_times_only_impls_that_run_on_the_cpu():
    impls = demo_steps.bench_impls("square", "cpu")
    assert "triton_flat" in impls and "numba_2d" in impls
    assert not any(name.startswith("cuda") for name in impls)
    assert "eager" not in impls and "compile" not in impls  # baselines come with every sweep; naming one isolates it



def test_the_gpu_bench_times_a_few_chosen_impls_of_each_op():
    # The demo teaches the method in about a minute on a GPU: the learner's version and the best of each DSL.
    for op in ("square", "softmax"):
        chosen, quick = demo_steps.bench_impls(op, "cuda"), demo_steps.bench_impls(op, "cuda", quick=True)
        impls = open_target(op, "cpu").op().impls
        contenders = [n for n in quick if n != "eager"]
        assert 2 <= len(contenders) < len(chosen) <= 4 and set(contenders) <= set(chosen) <= set(impls)
        assert not {"eager", "compile"} & set(chosen)  # both baselines come with every sweep
        assert "eager" in quick and "compile" not in quick  # --quick names eager: compile's first build is left out


def test_the_timing_step_passes_quickly_on_a_huge_last_level_cache(monkeypatch):
    from kernelkit.measure import host

    monkeypatch.setattr(host, "cpu_caches", lambda: [(2, "Unified", 4 << 20), (3, "Unified", 480 << 20)])
    buffer = io.StringIO()
    began = time.perf_counter()
    outcome = demo_steps.timing_step(demo_steps.DemoContext(Console(file=buffer, width=200), "cpu", 60.0))
    assert outcome.status == "ok", buffer.getvalue()
    assert time.perf_counter() - began < 15  # it read 2 x 480 MiB before every sample; now 64 MiB at most
    assert "reads 64 MiB before each sample, not 2x the 480 MiB last-level cache" in buffer.getvalue()


def test_the_cpu_bench_uses_each_ops_smallest_cpu_size():
    sweeps = {planned.op: planned for planned in demo_steps.bench_sweeps("cpu", quick=False)}
    assert sweeps["square"].sizes == ((1, 257),) and sweeps["softmax"].sizes == ((7, 33),)


def test_gpu_sweeps_stay_small():
    for quick in (False, True):
        for planned in demo_steps.check_sweeps("cuda", quick) + demo_steps.bench_sweeps("cuda", quick):
            assert len(planned.sizes) * len(planned.dtypes) <= 4


def _measurement(label: str, median_us: float, pct_bw: float | None = None) -> Measurement:
    ceiling = Ceiling(bandwidth_gbps=3000.0, pct_bandwidth=pct_bw) if pct_bw else None
    return measurement(label, even_samples(median_us * 1e-6, spread=0.01, n=21), mode="cold", first_call=0.5,
                       bytes=2 * 4 << 26, ceiling=ceiling)


def test_gpu_bench_step_names_the_fastest_impl_against_the_baselines(monkeypatch):
    asked = []

    def fake_bench_op(target, **kwargs):
        asked.append((target, kwargs))
        size, dtype = kwargs["sizes"][0], str(kwargs["dtypes"][0]).removeprefix("torch.")
        results = [BenchResult(target, name, backend, size, dtype, "cuda", "cold", Status.PASSED, role=role,
                               measurement=_measurement(name, median, pct))
                   for name, backend, role, median, pct in (("cuda_vec4", "cuda", "impl", 180.0, 93.0),
                                                            ("triton_flat", "triton", "impl", 185.0, 91.0),
                                                            ("eager", "eager", "baseline", 240.0, 70.0),
                                                            ("compile", "compile", "baseline", 181.0, 92.0))]
        base = {r.impl: r.measurement.samples for r in results if r.role == "baseline"}
        for r in results[:2]:
            r.speedups = {name: speedup(samples, r.measurement.samples) for name, samples in base.items()}
        results.append(BenchResult(target, "numba_flat", "numba", size, dtype, "cuda", "cold", Status.SKIPPED,
                                   message="impl 'numba_flat' supports float32, float16 only"))
        return SweepReport(device="cuda", mode="cold", results=results)

    monkeypatch.setattr(sweep, "bench_op", fake_bench_op)
    buffer = io.StringIO()
    outcome = demo_steps.bench_step(demo_steps.DemoContext(Console(file=buffer, width=160), "cuda", 60.0))
    text = buffer.getvalue()
    assert outcome.status == "ok", text
    assert [target for target, _ in asked] == ["square", "softmax"]
    assert all(kw["impls"] == demo_steps.bench_impls(target, "cuda") and kw["store"] is None and kw["budget"] == 1.0
               for target, kw in asked)
    assert "fastest impl at 67108864 float32: cuda_vec4, 180 µs" in text
    assert "faster than eager" in text and "as fast as compile (within noise)" in text
    assert "93% bw of the calibrated ceiling" in text
    assert "skipped numba_flat (float32): impl 'numba_flat' supports float32, float16 only" in text
    assert "Not stored" in text


def test_ncu_step_skips_with_the_reason_when_ncu_is_missing_or_locked(monkeypatch):
    from kernelkit.profiling import ncu

    def missing():
        raise ncu.NcuNotFound("Nsight Compute (ncu) not found: not in $KERNELKIT_NCU, not on PATH")

    ctx = demo_steps.DemoContext(Console(file=io.StringIO(), width=160), "cuda", 60.0)
    monkeypatch.setattr(ncu, "find_ncu", missing)
    outcome = demo_steps.ncu_step(ctx)
    assert outcome.status == "skipped"
    assert "Nsight Compute (ncu) not found on this machine" in outcome.note

    def locked(*args, **kwargs):
        raise ncu.NcuPermissionError("ERR_NVGPUCTRPERM: no access to the GPU's performance counters\nhelp")

    monkeypatch.setattr(ncu, "find_ncu", lambda: Path("/usr/local/cuda/bin/ncu"))
    monkeypatch.setattr(ncu, "run_ncu", locked)
    outcome = demo_steps.ncu_step(ctx)
    assert outcome.status == "skipped" and "ERR_NVGPUCTRPERM" in outcome.note


def _ladder_results(target: str, size: tuple[int, ...], dtype: str, impls: list[str]) -> list[BenchResult]:
    """The results bench_op would give: each impl timed as (rung index + 1)% ... of cuBLAS's 1 ms, one TIMEOUT."""
    base = _measurement("eager", 1000.0)
    out = [BenchResult(target, "eager", "eager", size, dtype, "cuda", "cold", Status.PASSED, role="baseline",
                       measurement=base)]
    for i, name in enumerate(n for n in impls if n != "eager"):
        m = _measurement(name, 1000.0 / (0.1 + 0.12 * i))
        out.append(BenchResult(target, name, name.split("_")[0], size, dtype, "cuda", "cold", Status.PASSED,
                               measurement=m, speedups={"eager": speedup(base.samples, m.samples)}))
    return out


def test_gpu_matmul_step_shows_each_rung_as_percent_of_cublas_and_the_best_triton(monkeypatch):
    asked = []

    def fake_bench_op(target, **kwargs):
        asked.append((target, kwargs))
        size, dtype = kwargs["sizes"][0], str(kwargs["dtypes"][0]).removeprefix("torch.")
        return SweepReport(device="cuda", mode="cold", results=_ladder_results(target, size, dtype, kwargs["impls"]))

    monkeypatch.setattr(sweep, "bench_op", fake_bench_op)
    buffer = io.StringIO()
    outcome = demo_matmul.matmul_step(demo_steps.DemoContext(Console(file=buffer, width=160), "cuda", 60.0))
    text = buffer.getvalue()
    assert outcome.status == "ok", text
    (_, ladder), (_, tri) = asked
    assert ladder["impls"] == [*demo_matmul.RUNGS, "eager"] and ladder["sizes"] == [(2048, 2048, 2048)]
    assert tri["impls"] == [*demo_matmul.TRITON, "eager"] and str(tri["dtypes"][0]) == "torch.bfloat16"
    assert all(kw["store"] is None and kw["budget"] == 0.5 for _, kw in asked)
    assert "matmul 2048x2048x2048 fp32: the CUDA fp32 ladder, % of cuBLAS" in text
    assert "eager (cuBLAS)" in text and "100.0%" in text
    naive = next(line for line in text.splitlines() if "cuda_naive" in line)
    assert "10.0%" in naive
    assert "cuda_naive 10%" in outcome.note and "cuda_warptile 82% of cuBLAS" in outcome.note
    assert "best Triton bf16: triton_tma 22% of cuBLAS" in outcome.note


def test_gpu_matmul_step_fails_on_a_timeout_and_says_which(monkeypatch):
    def fake_bench_op(target, **kwargs):
        size, dtype = kwargs["sizes"][0], str(kwargs["dtypes"][0]).removeprefix("torch.")
        results = _ladder_results(target, size, dtype, kwargs["impls"])
        results[1].status, results[1].measurement = Status.TIMEOUT, None
        return SweepReport(device="cuda", mode="cold", results=results)

    monkeypatch.setattr(sweep, "bench_op", fake_bench_op)
    ctx = demo_steps.DemoContext(Console(file=io.StringIO(), width=160), "cuda", 60.0)
    outcome = demo_matmul.matmul_step(ctx)
    assert outcome.status == "failed" and "cuda_naive TIMEOUT" in outcome.note


def test_the_gpu_matmul_step_stays_short():
    m, n, k = demo_matmul.LADDER_SIZE
    naive_seconds = 2 * m * n * k / 0.4e12  # the naive rung at ~1% of cuBLAS fp32's ~50 TFLOP/s
    assert naive_seconds < 0.1  # each timed call; the budget bounds the rest
    contenders = len(demo_matmul.RUNGS) + len(demo_matmul.TRITON) + 2  # + cuBLAS in each dtype
    assert contenders * demo_matmul.BUDGET["cuda"] <= 8


@pytest.mark.gpu
def test_gpu_matmul_step_times_every_rung_within_its_time_target():
    buffer = io.StringIO()
    began = time.perf_counter()
    outcome = demo_matmul.matmul_step(demo_steps.DemoContext(Console(file=buffer, width=160), "cuda", 120.0))
    elapsed = time.perf_counter() - began
    text = buffer.getvalue()
    assert outcome.status == "ok", text
    assert elapsed < 25, f"{elapsed:.0f} s\n{text}"
    for rung in demo_matmul.RUNGS:
        assert rung in outcome.note, outcome.note
    assert "best Triton bf16" in outcome.note and "TIMEOUT" not in text
