"""`calibrate` keeps no noisy ceiling (re-measures, then refuses with the reason), says when its figures came from
the cache and when they were measured, and prints how each was measured as short text, not a Python dict."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kernelkit.cli import app
from kernelkit.measure import ceilings
from kernelkit.measure.ceilings import MAX_SPREAD, NoisyCalibration, calibrate, load_cached
from kernelkit.measure.measurement import Measurement


def spread_bench(calls: list[str], spreads: list[float]):
    """A stand-in for timer.bench whose n-th call's samples have an IQR of ``spreads[n]`` of their median (the last
    one repeats)."""

    def bench(fn, *args, mode="cold", bytes=None, flops=None, budget=10.0, rse_target=0.005, label=""):
        spread = spreads[min(len(calls), len(spreads) - 1)]
        calls.append(label)
        samples = [1e-3 * (1 + spread * (i / 10 - 0.5) / 0.5) for i in range(11)]  # uniform: IQR = spread / 2 * 2
        return Measurement(label=label, mode=mode, device="cpu", device_name="fake", samples=samples,
                           first_call=1e-3, warmup_calls=1, stop_reason="converged", bytes=bytes, flops=flops)

    return bench


@pytest.fixture
def small_cpu_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ceilings, "CPU_COPY_BYTES", 1 << 20)
    monkeypatch.setattr(ceilings, "CPU_MATMUL_N", 64)


def test_a_noisy_calibration_is_measured_again_and_the_quiet_one_kept(fresh_cache, small_cpu_sizes):
    calls: list[str] = []
    got = calibrate("cpu", bench=spread_bench(calls, [0.5, 0.5, 0.04]))  # copy and matmul noisy, then quiet
    assert len(calls) == 4  # two tries of copy + matmul
    assert got.worst_spread()[1] <= MAX_SPREAD and not got.cached
    assert load_cached("cpu") == got


def test_a_calibration_noisy_in_every_try_is_refused_and_not_cached(fresh_cache, small_cpu_sizes):
    calls: list[str] = []
    with pytest.raises(NoisyCalibration, match=r"spread over \d+% of their median .* in each of 3 tries"):
        calibrate("cpu", bench=spread_bench(calls, [0.5]))
    assert len(calls) == 2 * ceilings.MEASURE_TRIES
    assert load_cached("cpu") is None
    remembered = r"refused at 20\d\d-.* UTC .*`kernelkit calibrate --force` measures again"
    with pytest.raises(NoisyCalibration, match=remembered):
        calibrate("cpu", bench=spread_bench(calls, [0.01]))  # remembered: the next worker does not measure again
    assert len(calls) == 2 * ceilings.MEASURE_TRIES
    forced = calibrate("cpu", force=True, bench=spread_bench(calls, [0.01]))
    assert not forced.cached and calibrate("cpu", bench=spread_bench(calls, [0.01])).cached


def test_a_noisy_cached_calibration_is_measured_again(fresh_cache, small_cpu_sizes, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(ceilings, "MAX_SPREAD", 1.0)  # an older kernelkit kept anything
    calibrate("cpu", bench=spread_bench(calls, [0.5]))
    monkeypatch.setattr(ceilings, "MAX_SPREAD", 0.10)
    again = calibrate("cpu", bench=spread_bench(calls, [0.02]))
    assert len(calls) == 4 and not again.cached
    cached = calibrate("cpu", bench=spread_bench(calls, [0.02]))
    assert len(calls) == 4 and cached.cached and cached == again


def test_calibrate_prints_short_text_and_says_cached_with_the_date(fresh_cache, small_cpu_sizes, monkeypatch):
    calls: list[str] = []
    real = ceilings.calibrate
    monkeypatch.setattr(ceilings, "calibrate", lambda device, force=False: real(
        device, force=force, bench=spread_bench(calls, [0.03])))
    first = CliRunner().invoke(app, ["calibrate", "--device", "cpu"])
    assert first.exit_code == 0, first.output
    assert "measured 20" in first.output and "cached" not in first.output
    assert "y.copy_(x), 1 MiB, hot, n=11, spread 3%" in first.output
    assert "torch.mm(a, b, out=c), 64x64x64, hot, n=11, spread 3%" in first.output
    assert "{" not in first.output and "median_s" not in first.output
    second = CliRunner().invoke(app, ["calibrate", "--device", "cpu"])
    assert second.exit_code == 0 and "cached (20" in second.output and len(calls) == 2


def test_calibrate_refusing_exits_1_with_the_reason(fresh_cache, small_cpu_sizes, monkeypatch):
    real = ceilings.calibrate
    monkeypatch.setattr(ceilings, "calibrate", lambda device, force=False: real(
        device, force=force, bench=spread_bench([], [0.6])))
    result = CliRunner().invoke(app, ["calibrate", "--device", "cpu"])
    assert result.exit_code == 1 and "calibration refused" in result.output and "Traceback" not in result.output
