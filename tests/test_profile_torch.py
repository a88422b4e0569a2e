"""kk.profile and `kernelkit profile`: table, trace and launch diagnosis; kk.nvtx ranges.

The diagnosis is checked on synthetic traces (a launch-bound and a GPU-bound window) so its arithmetic is pinned
on any machine; the GPU tests check that a real H100 trace gives the same verdicts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import typer
from typer.testing import CliRunner

import kernelkit as kk
from kernelkit.errors import LoadError, SpecError
from kernelkit.profiling import nvtx
from kernelkit.profiling.torch_profiler import ProfileResult, diagnose_launches, events_from_chrome_trace, profile
from kernelkit.report.profile_table import format_diagnosis

LABEL = "square/eager/64x48/float32"  # the op's first CPU size and dtype


@pytest.fixture(scope="module")
def cpu_result(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProfileResult]:
    # prepare_case sets TRITON_INTERPRET and NUMBA_ENABLE_CUDASIM for the CPU: restored after this module.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        mp.setenv("NUMBA_ENABLE_CUDASIM", "1")
        yield profile("square", "eager", device="cpu", steps=3, out_dir=tmp_path_factory.mktemp("profile"))


# ---- profiling on the CPU ----------------------------------------------------------------------------------


def test_cpu_profile_writes_a_chrome_trace_of_the_case(cpu_result: ProfileResult) -> None:
    assert cpu_result.label == LABEL and cpu_result.device == "cpu"
    assert cpu_result.trace_path.name == "square_eager_64x48_float32_cpu.trace.json"
    trace = json.loads(cpu_result.trace_path.read_text())
    names = [e.get("name") for e in trace["traceEvents"]]
    assert names.count(LABEL) == 3  # one record_function range per active step, none from wait or warm-up
    assert sum(1 for n in names if str(n).startswith("ProfilerStep#")) == 3


def test_cpu_table_is_sorted_by_cpu_time_and_names_the_aten_call(cpu_result: ProfileResult) -> None:
    assert "aten::square" in cpu_result.table  # torch.square, the eager impl
    assert "CPU total" in cpu_result.table and "CUDA total" not in cpu_result.table
    rows = [line.split()[0] for line in cpu_result.table.splitlines() if line.strip().startswith(("Profiler", "sq"))]
    assert rows[:2] == ["ProfilerStep*", LABEL]  # the outermost ranges take the most CPU time


def test_cpu_diagnosis_says_there_is_no_device_activity(cpu_result: ProfileResult) -> None:
    assert not cpu_result.diagnosis.has_device_activity and cpu_result.diagnosis.busy_us == 0
    assert "no device activity to diagnose" in format_diagnosis(cpu_result.diagnosis, "cpu")


def test_steps_must_be_positive() -> None:
    with pytest.raises(SpecError, match="--steps must be at least 1"):
        profile("square", "eager", device="cpu", steps=0)


# ---- the command -------------------------------------------------------------------------------------------


def _app() -> typer.Typer:
    from kernelkit.cli import app

    return app


def test_command_prints_table_diagnosis_and_trace_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    result = CliRunner().invoke(_app(), ["profile", "square", "--impl", "eager", "--device", "cpu", "--size",
                                         "7x5", "--steps", "1", "--out", str(tmp_path), "--tensorboard"])
    assert result.exit_code == 0, result.output
    assert "square/eager/7x5/float32" in result.output and "aten::square" in result.output
    assert "no device activity to diagnose" in result.output and "ui.perfetto.dev" in result.output
    assert (tmp_path / "square_eager_7x5_float32_cpu.trace.json").is_file()
    assert len(list((tmp_path / "tensorboard").glob("square_eager_7x5_float32_cpu.*.pt.trace.json"))) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--impl", "fast"], "op 'square' has no impl 'fast'; its impls: eager"),
        (["--impl", "eager", "--size", "big"], "bad size 'big'"),
        (["--impl", "eager", "--steps", "0"], "--steps must be at least 1"),
    ],
)
def test_command_bad_arguments_exit_2(args: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    result = CliRunner().invoke(_app(), ["profile", "square", "--device", "cpu", *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())  # rich wraps long lines


def test_bad_impl_raises_load_error_from_the_api() -> None:
    with pytest.raises(LoadError, match="has no impl 'fast'"):
        kk.profile("square", "fast", device="cpu")


# ---- the launch diagnosis on synthetic traces --------------------------------------------------------------


def _trace(kernel: str, *, step_us: float, kernel_at: list[float], kernel_us: float, launch_us: float,
           correlate: bool = True) -> dict[str, Any]:
    """Five 'ProfilerStep#' ranges of step_us; per step a cudaLaunchKernel of launch_us and a kernel of kernel_us."""
    def args(i: int) -> dict[str, int]:
        return {"correlation": 100 + i} if correlate else {}

    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "args": {"name": "python"}}]
    for i, at in enumerate(kernel_at):
        t0 = 1000.0 + i * step_us
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 3}", "ts": t0, "dur": step_us},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t0 + 2, "dur": launch_us,
             "args": args(i)},
            {"ph": "X", "cat": "kernel", "name": kernel, "ts": at, "dur": kernel_us, "args": args(i)},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamIsCapturing", "ts": t0 + 1, "dur": 0.5,
             "args": {"correlation": 900 + i} if correlate else {}},  # an API call that launches nothing
        ]
    return {"traceEvents": events}


def test_launch_bound_window_is_mostly_idle_and_warns_with_both_numbers() -> None:
    # 20 us steps, a 2 us kernel 10 us into each: the GPU idles 18 us between kernels, though each launch call
    # alone (1.5 us) is shorter than the kernel: the CPU's time between launches is what starves the GPU.
    trace = _trace("tiny_kernel", step_us=20, kernel_at=[1010 + 20 * i for i in range(5)], kernel_us=2,
                   launch_us=1.5)
    d = diagnose_launches(events_from_chrome_trace(trace))
    assert d.window_us == pytest.approx(100) and d.busy_fraction == pytest.approx(0.1)
    (k,) = d.kernels
    assert (k.name, k.count, k.launch_api) == ("tiny_kernel", 5, "cudaLaunchKernel")
    assert (k.device_us, k.launch_us, k.gap_us) == pytest.approx((2, 1.5, 18))
    assert k.launch_bound
    (warning,) = d.warnings
    assert "tiny_kernel is launch-bound" in warning
    assert "2.0 us on the GPU" in warning and "18.0 us idle" in warning and "1.5 us in cudaLaunchKernel" in warning


def test_gpu_bound_window_is_busy_and_has_no_warning() -> None:
    # The CPU queues a 49 us kernel every 20 us: they run back to back, 1 us apart, past the last step's end.
    trace = _trace("big_kernel", step_us=20, kernel_at=[1005 + 50 * i for i in range(5)], kernel_us=49, launch_us=6)
    d = diagnose_launches(events_from_chrome_trace(trace))
    assert d.window_us == pytest.approx(1254 - 1000)  # from the first step to the last kernel's end
    assert d.busy_fraction == pytest.approx(245 / 254)
    (k,) = d.kernels
    assert k.gap_us == pytest.approx(1) and not k.launch_bound and d.warnings == ()


def test_without_correlation_ids_launch_calls_pair_with_kernels_in_order() -> None:
    trace = _trace("tiny_kernel", step_us=20, kernel_at=[1010 + 20 * i for i in range(5)], kernel_us=2,
                   launch_us=6, correlate=False)
    (k,) = diagnose_launches(events_from_chrome_trace(trace)).kernels
    assert k.launch_us == pytest.approx(6) and k.launch_api == "cudaLaunchKernel"


def test_overlapping_kernels_count_once_in_the_busy_time() -> None:
    events = events_from_chrome_trace({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "kernel", "name": "a", "ts": 10, "dur": 40},
        {"ph": "X", "cat": "kernel", "name": "b", "ts": 30, "dur": 40},  # on another stream, overlapping a
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 80, "dur": 10},
    ]})
    d = diagnose_launches(events)
    assert d.busy_us == pytest.approx(70) and d.busy_fraction == pytest.approx(0.7)
    assert [k.name for k in d.kernels] == ["a", "b", "Memset (Device)"]
    assert [k.gap_us for k in d.kernels] == [None, 0.0, pytest.approx(10)]


# ---- kk.nvtx -----------------------------------------------------------------------------------------------


class _FakeNvtx:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def range_push(self, name: str) -> None:
        self.calls.append(f"push {name}")

    def range_pop(self) -> None:
        self.calls.append("pop")


def test_nvtx_is_a_no_op_without_cuda_as_context_manager_and_decorator() -> None:
    if not torch.cuda.is_available():
        assert nvtx._backend() is None

    @kk.nvtx.annotate("double")
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    with kk.nvtx.range("outer") as span:
        assert double(4) == 8
    assert span.name == "outer" and double.__doc__ == "Twice x."
    with pytest.raises(ValueError, match="inside"), kk.nvtx.range("raises"):
        raise ValueError("inside")  # errors pass through untouched


def test_nvtx_ranges_push_and_pop_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeNvtx()
    monkeypatch.setattr(nvtx, "_backend", lambda: fake)

    @kk.nvtx.annotate()
    def step() -> None:
        with kk.nvtx.range("inner"):
            pass

    @kk.nvtx.range("decorated")
    def failing() -> None:
        raise RuntimeError("boom")

    with kk.nvtx.range("outer"):
        step()
    with pytest.raises(RuntimeError):
        failing()
    qualname = step.__qualname__
    assert fake.calls == ["push outer", f"push {qualname}", "push inner", "pop", "pop", "pop",
                          "push decorated", "pop"]


# ---- on a GPU ----------------------------------------------------------------------------------------------

# In a subprocess: Triton fixes interpreter or GPU when a kernel is defined, and CPU tests in this process may
# have defined square's Triton kernels for the interpreter already.
GPU_PROFILE = textwrap.dedent("""
    import dataclasses, json, sys
    import kernelkit as kk
    r = kk.profile("square", "triton_flat", size=sys.argv[1], dtype="float32", device="cuda", out_dir=sys.argv[2])
    kernels = [dataclasses.asdict(k) | {"launch_bound": k.launch_bound} for k in r.diagnosis.kernels]
    print(json.dumps({"table": r.table, "trace": str(r.trace_path), "busy": r.diagnosis.busy_fraction,
                      "warnings": list(r.diagnosis.warnings), "kernels": kernels}))
""")


def _profile_on_gpu(size: str, out_dir: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", GPU_PROFILE, size, str(out_dir)], capture_output=True, text=True,
                          timeout=300, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
def test_triton_flat_on_cuda_names_its_kernel_and_keeps_the_gpu_busy(tmp_path: Path) -> None:
    # 2^26 floats: ~175 us of HBM traffic per call (ncu, H100), more than the CPU needs to launch it even under the
    # profiler (at 4096x4096, ~46 us, the profiled CPU side of Triton's launch path was the longer one).
    data = _profile_on_gpu("8192x8192", tmp_path)
    assert any("square_flat_kernel" in line for line in data["table"].splitlines()), data["table"]
    trace = json.loads(Path(data["trace"]).read_text())
    assert any(e.get("cat") == "kernel" and "square_flat_kernel" in e.get("name", "") for e in trace["traceEvents"])
    assert 0 < data["busy"] <= 1
    (flat,) = [k for k in data["kernels"] if "square_flat_kernel" in k["name"]]
    assert flat["count"] == 5, data["kernels"]  # the active steps only: no autotuning or warm-up launches
    assert 100 < flat["device_us"] < 400, data["kernels"]
    assert not flat["launch_bound"], data["kernels"]


@pytest.mark.gpu
def test_a_tiny_triton_flat_case_on_cuda_is_launch_bound(tmp_path: Path) -> None:
    data = _profile_on_gpu("1x1024", tmp_path)
    assert 0 < data["busy"] <= 1
    assert any("square_flat_kernel is launch-bound" in w for w in data["warnings"]), data


def test_the_averages_table_fits_120_columns_on_a_gpu_and_sorts_by_device_time():
    from types import SimpleNamespace

    from kernelkit.profiling.torch_profiler import averages_table

    def event(name, gpu_us):
        return SimpleNamespace(key=name, count=5, self_cpu_time_total=12.0, cpu_time_total=1500.0,
                               self_device_time_total=gpu_us, device_time_total=gpu_us)

    events = [event("aten::copy_", 3.0), event("triton_poi_fused_mul_0" + "_very_long_name" * 6, 2.5e6)]
    table = averages_table(events, "cuda")
    lines = table.splitlines()
    assert max(map(len, lines)) <= 120 and "GPU total" in lines[0]
    assert lines[2].startswith("triton_poi_fused_mul_0") and "2.50s" in lines[2] and "1.5ms" in lines[2]
    assert lines[3].startswith("aten::copy_") and lines[3].rstrip().endswith("3.0us")
