"""Triton backend: a do_bench that works in the interpreter, and what autotuning chose, recorded per case."""

from __future__ import annotations

import functools
import re
import time

import pytest
import torch

import kernelkit as kk
from kernelkit import backends
from kernelkit.backends import triton as triton_backend
from kernelkit.ops.square import square

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

CONFIG_TEXT = re.compile(r"^BLOCK_SIZE=\d+, num_warps=\d+, num_stages=\d+$")


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process in CPU mode (Triton's interpreter) for one test; the environment is restored after it."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    backends.prepare_process("cpu")
    assert triton_backend.interpreting()


def _autotuned(do_bench=triton_backend.do_bench):
    """A fresh autotuned copy kernel with two configs (each test gets its own tuning cache)."""

    @triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 64}, num_warps=2),
                              triton.Config({"BLOCK_SIZE": 256}, num_warps=4)],
                     key=["n_elements"], do_bench=do_bench)
    @triton.jit
    def copy_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        if EVEN:  # every block full: no mask needed
            tl.store(y_ptr + offsets, tl.load(x_ptr + offsets))
        else:
            tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)

    return copy_kernel


def _run(kernel, n: int, **meta: bool) -> None:
    x = torch.arange(n, dtype=torch.float32)
    y = torch.empty_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK_SIZE"]),)](x, y, n, **meta)
    assert torch.equal(x, y)


# ---- do_bench ---------------------------------------------------------------------------------------------


def test_do_bench_in_the_interpreter_times_a_wall_clock_loop(interpreter: None) -> None:
    calls = []

    def two_ms() -> None:
        calls.append(1)
        time.sleep(0.002)

    median, low, high = triton_backend.do_bench(two_ms, warmup=10, rep=20, quantiles=(0.5, 0.2, 0.8))
    assert 2.0 <= low <= median <= high < 50  # ms, as Triton reports
    # A first call, an estimate, ~10 ms of warm-up, ~20 ms of timed calls: ~5-20 calls of 2 ms; on a busy machine a
    # sleep of 2 ms can take 20, and the loop sizes itself from that, down to one timed call.
    assert 3 <= len(calls) <= 20
    assert isinstance(triton_backend.do_bench(two_ms, warmup=1, rep=4), float)


def test_do_bench_returns_what_triton_does() -> None:
    times = [3.0, 1.0, 2.0, 10.0, 4.0]
    expected = {  # torch.quantile's linear interpolation; Triton's return modes
        ((0.5, 0.2, 0.8), "mean"): [3.0, 1.8, 5.2], ((0.5,), "mean"): 3.0, (None, "mean"): 4.0,
        (None, "median"): 3.0, (None, "min"): 1.0, (None, "max"): 10.0, (None, "all"): times,
    }
    triton_own = getattr(triton.testing, "_summarize_statistics", None)  # private: 3.6 to 3.9 have it
    for (quantiles, mode), want in expected.items():
        got = triton_backend.summarize_times(list(times), quantiles, mode)
        assert got == pytest.approx(want) and type(got) is type(want), (quantiles, mode)
        if triton_own is not None:
            assert got == pytest.approx(triton_own(list(times), quantiles, mode))
    with pytest.raises(ValueError, match="return_mode"):
        triton_backend.summarize_times(times, None, "average")


def test_do_bench_on_a_gpu_delegates_to_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    seen = {}

    def fake(fn, **kwargs):
        seen.update(kwargs, fn=fn)
        return [0.5, 0.25, 0.75]

    monkeypatch.setattr(triton.testing, "do_bench", fake)
    fn = lambda: None
    assert triton_backend.do_bench(fn, quantiles=(0.5, 0.2, 0.8)) == [0.5, 0.25, 0.75]
    assert seen == {"fn": fn, "warmup": 25, "rep": 100, "grad_to_none": None, "quantiles": (0.5, 0.2, 0.8),
                    "return_mode": "mean"}


@pytest.mark.gpu
def test_do_bench_times_a_gpu_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = torch.ones(1 << 22, device="cuda")
    median, low, high = triton_backend.do_bench(lambda: x.mul_(1.0), quantiles=(0.5, 0.2, 0.8))
    assert 0 < low <= median <= high < 100


# ---- what autotuning chose --------------------------------------------------------------------------------


def test_autotune_details_report_the_config_and_whether_this_call_tuned(interpreter: None) -> None:
    kernel = _autotuned()
    assert triton_backend.autotune_details([kernel]) == {}  # never launched: nothing chosen yet

    before = triton_backend.autotune_state([kernel])
    _run(kernel, 300, EVEN=False)
    first = triton_backend.autotune_details([kernel], before)["copy_kernel"]
    assert CONFIG_TEXT.match(first["config"]), first
    assert first["tuned"] is True and 0 < first["tuning_s"] < 30
    assert len(first["timings_ms"]) == 2 and first["config"] == next(iter(first["timings_ms"]))  # fastest first

    before = triton_backend.autotune_state([kernel])
    _run(kernel, 300, EVEN=False)  # the same key: the config comes from the cache, nothing is timed
    again = triton_backend.autotune_details([kernel], before)["copy_kernel"]
    assert again == {"config": first["config"], "tuned": False, "tuning_s": None}

    before = triton_backend.autotune_state([kernel])
    _run(kernel, 1000, EVEN=False)  # a new numel is a new key
    assert triton_backend.autotune_details([kernel], before)["copy_kernel"]["tuned"] is True


def test_autotune_details_find_kernels_behind_builders_and_heuristics(interpreter: None) -> None:
    @functools.cache
    def build():
        return triton.heuristics({"EVEN": lambda args: args["n_elements"] % 256 == 0})(_autotuned())

    plain = triton.jit(lambda x_ptr: None)
    assert triton_backend.autotune_details([build, plain, object()]) == {}  # the builder has not run: skipped
    _run(build(), 512)
    assert list(triton_backend.autotune_details([build, plain, object()])) == ["copy_kernel"]


def test_config_text_lists_what_was_set() -> None:
    config = triton.Config({"BLOCK_SIZE": 1024, "GROUP": 8}, num_warps=4, num_stages=2)
    assert triton_backend.format_config(config) == "BLOCK_SIZE=1024, GROUP=8, num_warps=4, num_stages=2"
    config = triton.Config({"BLOCK_SIZE": 64}, num_warps=8, num_stages=3, num_ctas=2, maxnreg=128)
    assert triton_backend.format_config(config) == "BLOCK_SIZE=64, num_warps=8, num_stages=3, num_ctas=2, maxnreg=128"


def test_triton_kernels_listed_by_an_impl_are_never_compiled() -> None:
    impl = square.impls["triton_flat"]
    assert impl.kernels and not any(hasattr(k, "compile") for k in impl.kernels)
    backends.ensure_runnable(impl, torch.float32, "cpu")  # would raise AttributeError calling .compile()


def test_check_records_autotuning_per_case_apart_from_run_time(interpreter: None) -> None:
    # 5x77 is used by no other test, so the first case in this process tunes and the second (seed 1) reuses it.
    report = kk.check("square", impls=["triton_flat", "eager"], device="cpu", isolate=False, sizes=[(5, 77)],
                      dtypes=[torch.float32], seeds=2)
    flat = [r for r in report.results if r.impl == "triton_flat"]
    assert report.ok and len(flat) == 2, [(r.case_id, r.status, r.message) for r in report.results]
    first, second = (r.details["autotune"]["square_flat_kernel"] for r in flat)
    assert CONFIG_TEXT.match(first["config"]) and first["tuned"] is True
    assert 0 < first["tuning_s"] < flat[0].seconds  # the tuning is inside the case's wall time, reported apart
    assert second == {"config": first["config"], "tuned": False, "tuning_s": None}
    assert all("autotune" not in r.details for r in report.results if r.impl == "eager")
