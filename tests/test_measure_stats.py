"""Statistics of timing samples: summaries, the median's standard error, speedups with bootstrap intervals."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from kernelkit.measure.measurement import BenchResult, Ceiling, Measurement
from kernelkit.measure.stats import Ratio, median_rse, quantile, speedup, summarize
from kernelkit.results import Status


def test_summary_matches_numpy():
    rng = random.Random(0)
    xs = [rng.lognormvariate(0, 0.3) for _ in range(101)]
    s = summarize(xs)
    arr = np.array(xs)
    assert s.n == 101
    assert s.median == pytest.approx(np.median(arr))
    assert s.mean == pytest.approx(arr.mean())
    assert s.p20 == pytest.approx(np.quantile(arr, 0.2)) and s.p80 == pytest.approx(np.quantile(arr, 0.8))
    assert s.stdev == pytest.approx(arr.std(ddof=1))
    assert s.iqr == pytest.approx(np.quantile(arr, 0.75) - np.quantile(arr, 0.25))
    assert (s.min, s.max) == (min(xs), max(xs))


def test_one_sample_has_no_spread_and_no_error_estimate():
    s = summarize([2.0])
    assert (s.median, s.stdev, s.iqr) == (2.0, 0.0, 0.0)
    assert math.isinf(s.rse)
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_noise_flag_at_ten_percent_iqr():
    assert not summarize([1.0, 1.01, 0.99, 1.0, 1.02]).noisy
    assert summarize([1.0, 1.3, 0.8, 1.0, 1.2, 0.7]).noisy


def test_median_rse_shrinks_like_one_over_root_n():
    rng = random.Random(1)
    small = median_rse([rng.gauss(1, 0.05) for _ in range(100)])
    large = median_rse([rng.gauss(1, 0.05) for _ in range(10_000)])
    assert 0.003 < small < 0.012  # ~1.25 * 0.05 / sqrt(100) = 0.006
    assert large < small / 5
    assert math.isinf(median_rse([1.0, 2.0]))


def test_median_rse_ignores_a_few_wild_outliers():
    xs = [1.0 + 0.001 * (i % 7) for i in range(200)]
    assert median_rse(xs + [50.0] * 5) < 2 * median_rse(xs) + 1e-4


def test_speedup_is_called_only_when_the_interval_excludes_one():
    rng = random.Random(2)
    base = [rng.gauss(1.0, 0.01) for _ in range(200)]
    fast = [rng.gauss(0.8, 0.01) for _ in range(200)]
    slow = [rng.gauss(1.2, 0.01) for _ in range(200)]
    noisy = [rng.gauss(1.0, 0.3) for _ in range(15)]
    assert speedup(base, fast).verdict == "faster" and speedup(base, fast).value == pytest.approx(1.25, rel=0.01)
    assert speedup(base, slow).verdict == "slower"
    r = speedup(base, noisy)
    assert r.verdict == "same" and r.low < 1.0 < r.high


def test_speedup_is_reproducible_and_needs_samples():
    rng = random.Random(3)
    a, b = [rng.random() for _ in range(50)], [rng.random() for _ in range(50)]
    assert speedup(a, b) == speedup(a, b)
    with pytest.raises(ValueError):
        speedup([], [1.0])


def test_ratio_verdict_edges():
    assert Ratio(1.5, 1.0, 2.0).verdict == "same"  # touching 1.0 is not excluding it
    assert Ratio(1.5, 1.01, 2.0).verdict == "faster"
    assert Ratio(0.5, 0.4, 0.99).verdict == "slower"
    assert Ratio(1.25, 1.2, 1.3).describe() == "1.25x [1.20, 1.30]"


def test_bench_result_roundtrips_through_json_with_suspect_flag():
    m = Measurement("sq", "cold", "cuda", "H100", [1e-3, 1.1e-3, 0.9e-3], 0.2, 5, "converged",
                    bytes=4_000_000_000, ceiling=Ceiling(3000.0, None, "", 133.3), clocks_mhz=[1980.0] * 3,
                    max_clock_mhz=1980.0)
    r = BenchResult("square", "cuda_vec4", "cuda", (4096, 4096), "float32", "cuda", "cold", Status.PASSED,
                    measurement=m, speedups={"eager": Ratio(1.2, 1.1, 1.3)})
    data = json.loads(json.dumps(r.to_dict()))
    back = BenchResult.from_dict(data)
    assert back.suspect and data["suspect"]
    assert back.measurement.samples == m.samples and back.measurement.gbps == pytest.approx(4000.0)
    assert back.speedups["eager"].verdict == "faster"
    assert back.measurement.clock_scaling == pytest.approx(1.0)
    assert back.case_id == "square/cuda_vec4/4096x4096/float32"
    assert not Ceiling(3000.0, pct_bandwidth=105.0).suspect and Ceiling(pct_flops=105.1).suspect
