"""Roofline figures (PNG/SVG, matplotlib): arithmetic intensity from the cost model against achieved FLOP/s, under
the calibrated bandwidth and compute ceilings the results carry. The numbers come from report.roofline, as the HTML
report's rooflines do.

One figure per (op, dtype, mode), a point per impl and size (baselines hollow), and one per mode with every op
on it (square, softmax and matmul side by side), coloured by op. matplotlib is imported only when one is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kernelkit.measure.measurement import BenchResult
from kernelkit.report.bench_table import baseline_impls
from kernelkit.report.roofline import RooflinePoint, compute_roofs, points

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MARKERS = "osD^vP*X<>"


def roofline_groups(results: Sequence[BenchResult]) -> dict[tuple[str, ...], list[RooflinePoint]]:
    """The figures to draw: (op, dtype, mode, device) -> its points, and (mode, device) -> every op's points where
    more than one (op, dtype) has points (with one, the combined figure would repeat it)."""
    per_op: dict[tuple[str, ...], list[RooflinePoint]] = {}
    for p in points(list(results)):
        r = p.result
        per_op.setdefault((r.op, r.dtype, r.mode, r.device), []).append(p)
    combined: dict[tuple[str, ...], list[RooflinePoint]] = {}
    for (_op, _dtype, mode, device), group in per_op.items():
        combined.setdefault((mode, device), []).extend(group)
    wide = {key: group for key, group in combined.items()
            if len({(p.result.op, p.result.dtype) for p in group}) > 1}
    return {**per_op, **wide}


def build_roofline_figure(found: Sequence[RooflinePoint], *, combined: bool = False) -> Figure:
    """Log-log: the bandwidth roof (bytes/s x intensity) bent flat at each compute ceiling, the ridge points marked,
    and the points: by impl (one op and dtype) or by op and dtype (``combined``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    bw, peaks = compute_roofs(list(found))
    xs = [p.ai for p in found] + [peak * 1e3 / bw for peak in peaks if bw]
    ys = [p.achieved for p in found] + list(peaks)
    lo_x, hi_x = min(xs) / 4, max(xs) * 4
    _roofs(ax, bw, peaks, lo_x, hi_x, min(ys) / 4)
    baselines = baseline_impls([p.result for p in found])
    keys = list(dict.fromkeys(_series_key(p, combined) for p in found))
    for i, key in enumerate(keys):
        mine = [p for p in found if _series_key(p, combined) == key]
        hollow = not combined and mine[0].result.impl in baselines
        (line,) = ax.plot([p.ai for p in mine], [p.achieved * 1e12 for p in mine], linestyle="none",
                          marker=MARKERS[i % len(MARKERS)], markersize=7,
                          label=f"{key} (baseline)" if hollow else key)
        if hollow:
            line.set_markerfacecolor("none")
    ax.set_xlim(lo_x, hi_x)
    ax.set_xlabel("arithmetic intensity (FLOP/byte, from the cost model)")
    ax.set_ylabel("achieved FLOP/s (median)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(_title(found, combined, bool(peaks or bw)), fontsize="medium")
    return fig


def _roofs(ax: Axes, bw: float | None, peaks: dict[float, list[str]], lo: float, hi: float, floor: float) -> None:
    """The bandwidth diagonal up to each ridge, each compute ceiling flat from its ridge, labelled; ``floor`` in
    TFLOP/s keeps the diagonal's start inside the plot."""
    if bw:
        start = max(lo, floor * 1e3 / bw)
        end = min(hi, max(peaks, default=bw * hi / 1e3) * 1e3 / bw)
        ax.plot([start, end], [bw * start * 1e9, bw * end * 1e9], color="black", linewidth=1.3,
                label=f"copy {bw:,.0f} GB/s (calibrated)")
    for peak, kinds in sorted(peaks.items()):
        ridge = peak * 1e3 / bw if bw else lo
        ax.plot([max(ridge, lo), hi], [peak * 1e12] * 2, color="black", linestyle="--", linewidth=1.1)
        label = f"{'/'.join(sorted(kinds))} matmul {peak:,.0f} TFLOP/s (calibrated)"
        ax.annotate(label, (hi, peak * 1e12), xytext=(-4, 4), textcoords="offset points", ha="right",
                    fontsize="small")
        if bw and lo < ridge < hi:
            ax.axvline(ridge, color="grey", linestyle=":", linewidth=0.8)
            ax.annotate(f"ridge {ridge:.3g}", (ridge, peak * 1e12), xytext=(4, -12), textcoords="offset points",
                        fontsize="x-small", color="grey")


def _series_key(p: RooflinePoint, combined: bool) -> str:
    return f"{p.result.op} {p.result.dtype}" if combined else p.result.impl


def _title(found: Sequence[RooflinePoint], combined: bool, calibrated: bool) -> str:
    first = found[0].result
    names = sorted({p.result.measurement.device_name for p in found
                    if p.result.measurement and p.result.measurement.device_name})
    what = "every op" if combined else f"{first.op} · {first.dtype}"
    title = f"roofline · {what} · {first.mode} mode · {', '.join(names) or first.device}"
    if not calibrated:
        title += "\nno calibrated ceilings in these results"
    if first.device == "cpu":
        title += "\nCPU timings: not GPU performance"
    return title

