"""Statistics of timing samples: robust summaries, the median's standard error, and speedups with confidence.

Timing samples are skewed (a long right tail of interrupted runs), so the median is the headline figure, its
spread is shown as p20-p80 and IQR/median, and comparisons use a bootstrap of the ratio of medians.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from kernelkit import wire

NOISY_IQR = 0.10  # IQR/median at or above this: the result carries a noise warning
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000


@wire.register
@dataclass(frozen=True)
class Stats:
    """A summary of n timing samples, in seconds."""

    n: int
    median: float
    mean: float
    min: float
    max: float
    p20: float
    p80: float
    stdev: float
    iqr: float
    rse: float  # the median's relative standard error (see median_rse)

    @property
    def iqr_rel(self) -> float:
        return self.iqr / self.median if self.median > 0 else math.inf

    @property
    def noisy(self) -> bool:
        return self.iqr_rel >= NOISY_IQR

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "iqr_rel": self.iqr_rel}


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of already sorted values, linearly interpolated (numpy's default rule)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median_rse(samples: Sequence[float]) -> float:
    """The relative standard error of the median, distribution-free.

    The 95% confidence interval of a median runs between the order statistics n/2 -+ 1.96*sqrt(n)/2 (the
    binomial rule); its half-width / 1.96 estimates the standard error without assuming normal samples.
    Fewer than 3 samples: infinite (no estimate).
    """
    n = len(samples)
    if n < 3:
        return math.inf
    ordered = sorted(samples)
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    med = quantile(ordered, 0.5)
    if med <= 0:
        return math.inf
    return (ordered[hi] - ordered[lo]) / (2 * 1.96) / med


def summarize(samples: Sequence[float]) -> Stats:
    """Median, mean, min, max, p20/p80, stdev, IQR and the median's RSE of ``samples`` (at least one)."""
    if not samples:
        raise ValueError("no samples to summarize")
    ordered = sorted(samples)
    n = len(ordered)
    mean = math.fsum(ordered) / n
    stdev = math.sqrt(math.fsum((x - mean) ** 2 for x in ordered) / (n - 1)) if n > 1 else 0.0
    return Stats(
        n=n,
        median=quantile(ordered, 0.5),
        mean=mean,
        min=ordered[0],
        max=ordered[-1],
        p20=quantile(ordered, 0.2),
        p80=quantile(ordered, 0.8),
        stdev=stdev,
        iqr=quantile(ordered, 0.75) - quantile(ordered, 0.25),
        rse=median_rse(ordered),
    )


@wire.register
@dataclass(frozen=True)
class Ratio:
    """``baseline / candidate`` of medians with a bootstrap confidence interval: > 1 means the candidate is faster."""

    value: float
    low: float
    high: float
    confidence: float = CONFIDENCE

    @property
    def verdict(self) -> str:
        """'faster' or 'slower' only when the interval excludes 1.0; otherwise 'same' (no detectable change)."""
        if self.low > 1.0:
            return "faster"
        if self.high < 1.0:
            return "slower"
        return "same"

    def describe(self) -> str:
        return f"{self.value:.2f}x [{self.low:.2f}, {self.high:.2f}]"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def speedup(
    baseline: Sequence[float], candidate: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> Ratio:
    """median(baseline) / median(candidate), with a percentile bootstrap interval (each side resampled alone).

    Seeded, so the same samples always give the same interval.
    """
    if not baseline or not candidate:
        raise ValueError("a speedup needs samples on both sides")
    rng = np.random.default_rng(seed)
    base, cand = np.asarray(baseline, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    value = float(np.median(base) / np.median(cand))
    ratios = _resampled_medians(base, resamples, rng) / _resampled_medians(cand, resamples, rng)
    tail = (1 - CONFIDENCE) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return Ratio(value, float(low), float(high))


def _resampled_medians(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The medians of ``resamples`` bootstrap resamples of ``values``, in chunks of at most ~4M draws."""
    per_chunk = max(1, 4_000_000 // len(values))
    out = []
    for start in range(0, resamples, per_chunk):
        rows = min(per_chunk, resamples - start)
        out.append(np.median(values[rng.integers(0, len(values), size=(rows, len(values)))], axis=1))
    return np.concatenate(out)
