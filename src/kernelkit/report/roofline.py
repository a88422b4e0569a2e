"""Where a timed case sits on the roofline: the one computation that the terminal table's "bound" column, the
PNG/SVG roofline figures (plot.py) and the HTML report's rooflines (html_plots.py) share.

A case whose cost model gives bytes and FLOPs has an arithmetic intensity, FLOPs / bytes. Under the device's
calibrated ceilings (carried by each measurement: the copy bandwidth, and the matmul rate of the op's compute dtype)
its attainable rate is min(bandwidth x intensity, matmul rate); the intensity where the two meet is the ridge point.
Left of the ridge a case is memory-bound and the bandwidth ceiling is the one that binds; at or right of it,
compute-bound, and the matmul rate binds. A case with bytes but no FLOPs is memory-bound by its own cost model.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelkit.measure.measurement import BenchResult, Ceiling, Measurement

MEMORY, COMPUTE = "memory", "compute"


@dataclass(frozen=True)
class Binding:
    """Which ceiling binds a measurement ("memory", "compute", or "" when the ceilings cannot tell) and its % of it."""

    bound: str = ""
    pct: float | None = None
    kind: str = ""  # "bw" or "flops": the short name of the binding ceiling, as the table prints it


@dataclass(frozen=True)
class RooflinePoint:
    """One timed case with both a byte and a FLOP count: intensity in FLOP/byte, rates in TFLOP/s.

    ``roof`` is the attainable rate at ``ai`` under the ceilings the case carries, ``ridge`` the intensity where
    its bandwidth and compute roofs meet (None where a ceiling is missing).
    """

    result: BenchResult
    ai: float
    achieved: float
    roof: float | None
    ridge: float | None
    binding: Binding


def ridge_point(ceiling: Ceiling | None) -> float | None:
    """FLOP/byte where bandwidth x intensity reaches the matmul rate; None without both ceilings."""
    if ceiling is None or not ceiling.bandwidth_gbps or not ceiling.tflops:
        return None
    return ceiling.tflops * 1e12 / (ceiling.bandwidth_gbps * 1e9)


def attainable(ceiling: Ceiling | None, ai: float) -> float | None:
    """TFLOP/s attainable at intensity ``ai``: the lower of the bandwidth roof and the compute roof present."""
    if ceiling is None:
        return None
    roofs = [v for v in (ceiling.bandwidth_gbps * ai / 1e3 if ceiling.bandwidth_gbps else None,
                         ceiling.tflops or None) if v is not None]
    return min(roofs) if roofs else None


def binding(m: Measurement | None) -> Binding:
    """The ceiling that binds ``m``, from its cost model's intensity against the ridge point."""
    c = m.ceiling if m is not None else None
    if m is None or c is None:
        return Binding()
    memory = Binding(MEMORY, c.pct_bandwidth, "bw")
    compute = Binding(COMPUTE, c.pct_flops, "flops")
    has_bw, has_flops = c.pct_bandwidth is not None, c.pct_flops is not None
    if m.bytes and not m.flops:
        return memory if has_bw else Binding()
    if m.flops and not m.bytes:
        return compute if has_flops else Binding()
    ridge = ridge_point(c)
    if not m.bytes or not m.flops or ridge is None or not (has_bw and has_flops):
        return Binding()  # one ceiling missing (an uncalibrated dtype): which one binds is unknown
    return compute if m.flops / m.bytes >= ridge else memory


def place(result: BenchResult) -> RooflinePoint | None:
    """``result`` on the roofline; None unless it was timed and its cost model gives both bytes and FLOPs."""
    m = result.measurement
    if m is None or not m.samples or not m.bytes or not m.flops:
        return None
    median = m.median
    if median <= 0:
        return None
    ai = m.flops / m.bytes
    return RooflinePoint(result, ai, m.flops / median / 1e12, attainable(m.ceiling, ai), ridge_point(m.ceiling),
                         binding(m))


def points(results: list[BenchResult] | tuple[BenchResult, ...]) -> list[RooflinePoint]:
    """The results that sit on a roofline, in order."""
    return [p for p in map(place, results) if p is not None]


def compute_roofs(found: list[RooflinePoint]) -> tuple[float | None, dict[float, list[str]]]:
    """(the copy bandwidth in GB/s most points carry, {compute rate in TFLOP/s: its kinds}) of a figure's points:
    one roof per rate, so bf16 and fp16 share one when equal."""
    ceilings = [p.result.measurement.ceiling for p in found if p.result.measurement and p.result.measurement.ceiling]
    bandwidths = [c.bandwidth_gbps for c in ceilings if c.bandwidth_gbps]
    bw = max(set(bandwidths), key=bandwidths.count) if bandwidths else None  # one device: one copy ceiling
    peaks: dict[float, list[str]] = {}
    for c in ceilings:
        if c.tflops and (c.flops_kind or "matmul") not in peaks.setdefault(c.tflops, []):
            peaks[c.tflops].append(c.flops_kind or "matmul")
    return bw, peaks
