"""The HTML report's plots, drawn here as inline SVG text: no plotting library, nothing fetched.

Rate plots: one per (op, dtype, mode, device), as in report.plot (the PNG/SVG files): the achieved GB/s or
TFLOP/s (plot.choose_metric) against size, one line per impl (baselines dashed) with its p20-p80 band, and the
calibrated ceiling as a dotted line. Rooflines: one per (device, mode): each timed case that has both bytes and
FLOPs sits at x = arithmetic intensity (FLOPs / bytes of its cost model) and y = achieved FLOP/s, under the
bandwidth roof (copy GB/s x intensity) and the compute roof of each dtype's matmul ceiling.

Peak memory: one per (op, dtype, mode, device) whose results carry it: each impl's peak device memory of one call
against size.

Each point carries its numbers in a <title> (a tooltip without the script) and in data- attributes; only the
median and p20/p80 of a case reach the page, never its raw samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from html import escape

from rich.text import Text

from kernelkit.measure.measurement import BenchResult
from kernelkit.measure.stats import Stats
from kernelkit.report import roofline
from kernelkit.report.bench_table import baseline_impls, ceiling_text, format_bytes, format_time
from kernelkit.report.plot import TIME, Metric, ceiling_line, choose_metric, ordered_sizes, plot_groups
from kernelkit.report.roofline import RooflinePoint

# matplotlib's tab10: distinct, readable on white, and the colours of the report's PNG plots.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
WIDTH, HEIGHT = 640, 330  # the plot area's frame, in SVG units; the legend goes below
LEFT, RIGHT, TOP, BOTTOM = 66, 18, 16, 62
LEGEND_ROW = 18
SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"),
      (1e-12, "p"))


def attr(value: object) -> str:
    """A value made safe inside a double-quoted attribute."""
    return escape(str(value), quote=True)


def plain(markup: str) -> str:
    """The text of the terminal table's rich markup ('[bold red]SUSPECT 134% bw[/]' -> 'SUSPECT 134% bw')."""
    return Text.from_markup(markup).plain


def num(value: float) -> str:
    """An SVG coordinate: two decimals are a hundredth of a pixel."""
    return f"{value:.2f}"


# --- scales ---


@dataclass(frozen=True)
class LinearScale:
    """Data [lo, hi] onto pixels [a, b] (b < a for a y axis: up is smaller)."""

    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, v: float) -> float:
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)

    def ticks(self) -> list[float]:
        step = nice_step((self.hi - self.lo) / 5)
        first = math.ceil(self.lo / step)
        return [i * step for i in range(first, int(math.floor(self.hi / step + 1e-9)) + 1)]


@dataclass(frozen=True)
class LogScale:
    """Data [lo, hi] (both > 0, whole decades) onto pixels [a, b], log10-spaced."""

    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, v: float) -> float:
        span = math.log10(self.hi) - math.log10(self.lo)
        return self.a + (math.log10(v) - math.log10(self.lo)) / span * (self.b - self.a)

    def ticks(self) -> list[float]:
        decades = range(round(math.log10(self.lo)), round(math.log10(self.hi)) + 1)
        every = max(1, math.ceil(len(decades) / 9))  # at most ~9 labels: a CPU roofline spans many decades
        return [10.0**d for d in decades if (d - decades[0]) % every == 0]


def nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``raw``: tick spacing people read at a glance."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))


def decades(lo: float, hi: float) -> tuple[float, float]:
    """The whole decades around [lo, hi] (positive), with at least one decade between them."""
    low, high = 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))
    return (low, high * 10) if high <= low else (low, high)


def si(value: float, unit: str) -> str:
    """'3 TFLOP/s', '100 GB/s', '10 µs', '100 G': a value with an SI prefix."""
    for scale, prefix in SI:
        if abs(value) >= scale * 0.9995:
            return f"{value / scale:.3g} {prefix}{unit}".strip()
    return f"{value:.3g} {unit}".strip()


# --- rate against size ---


def rate_plots(results: Sequence[BenchResult]) -> list[str]:
    """One <figure> per (op, dtype, mode, device) of the timed results; empty when nothing was timed."""
    return [rate_plot(group) for group in plot_groups(results).values()]


@dataclass(frozen=True)
class RatePoint:
    """One case on a rate plot: its size's slot, the rate at the median, the band's edges, and its tooltip."""

    slot: int
    value: float
    low: float  # the rate at the p80 time (a rate falls as time grows); for the time itself, the p20 time
    high: float
    text: str


def rate_plot(results: Sequence[BenchResult]) -> str:
    """The achieved rate (or the time, with no cost model) against size of one group, a line per impl."""
    metric = choose_metric(results)
    sizes = ordered_sizes(results)
    baselines = baseline_impls(results)
    by_impl: dict[str, list[RatePoint]] = {}
    for r in results:
        s = r.measurement.stats  # type: ignore[union-attr]
        value, low, high = (metric.value(r, t) for t in (s.median, s.p80, s.p20))
        if math.isfinite(value):
            text = _point_text(r, s, metric, value, low, high)
            by_impl.setdefault(r.impl, []).append(RatePoint(sizes.index(r.size), value, low, high, text))
    return _size_plot(_caption(results), sizes, by_impl, baselines, f"{metric.label} (median; band p20-p80)",
                      ceiling_line(list(results), metric, None))


def memory_plots(results: Sequence[BenchResult]) -> list[str]:
    """One <figure> per (op, dtype, mode, device) whose results carry a peak memory; empty when none does."""
    return [memory_plot(group) for group in plot_groups(results).values()
            if any(r.measurement.peak_bytes is not None for r in group)]  # type: ignore[union-attr]


def memory_plot(results: Sequence[BenchResult]) -> str:
    """Peak device memory of one call (measure.memory) against size, a line per impl: quadratic growth shows."""
    measured = [r for r in results if r.measurement is not None and r.measurement.peak_bytes is not None]
    sizes = ordered_sizes(measured)
    baselines = baseline_impls(measured)
    by_impl: dict[str, list[RatePoint]] = {}
    for r in measured:
        peak = r.measurement.peak_bytes  # type: ignore[union-attr]
        text = f"{r.impl} · {'x'.join(map(str, r.size))} · {r.dtype}\npeak {format_bytes(peak)} above the inputs"
        by_impl.setdefault(r.impl, []).append(RatePoint(sizes.index(r.size), peak / 2**20, peak / 2**20,
                                                        peak / 2**20, text))
    return _size_plot(_caption(measured) + " · peak memory", sizes, by_impl, baselines,
                      "peak memory of one call (MiB)")


def _size_plot(caption: str, sizes: Sequence[tuple[int, ...]], by_impl: dict[str, list[RatePoint]],
               baselines: Collection[str], y_label: str, ceiling: tuple[float, str] | None = None) -> str:
    """A <figure> of values against size: sizes as categories on x, a linear y from 0 past the highest point (and
    the ceiling's dotted line, when given), a series per impl (baselines dashed) that the impl toggles hide."""
    finite = [v for points in by_impl.values() for p in points for v in (p.value, p.low, p.high) if math.isfinite(v)]
    top = max([*finite, ceiling[0] if ceiling else 0.0, 1e-30]) * 1.08
    x_step = (WIDTH - LEFT - RIGHT) / max(len(sizes), 1)
    x = lambda i: LEFT + (i + 0.5) * x_step  # noqa: E731 - categorical sizes, each in the middle of its slot
    y = LinearScale(0.0, top, HEIGHT - BOTTOM, TOP)
    parts = _y_axis(y, [(t, f"{t:g}") for t in y.ticks()], y_label) + _size_axis(sizes, x)
    if ceiling:
        cy = num(y(ceiling[0]))
        parts.append(f'<line class="ceiling" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{cy}" y2="{cy}"/>'
                     f'<text x="{WIDTH - RIGHT - 4}" y="{num(y(ceiling[0]) - 4)}" text-anchor="end">'
                     f'{escape(ceiling[1])}</text>')
    legend = []
    for n, (impl, points) in enumerate(by_impl.items()):
        color = PALETTE[n % len(PALETTE)]
        points.sort(key=lambda p: p.slot)
        parts.append(_series(impl, points, color, impl in baselines, x, y))
        legend.append((impl, f"{impl} (baseline)" if impl in baselines else impl, color, impl in baselines))
    return _figure(caption, parts, legend, interactive=True)


def _size_axis(sizes: Sequence[tuple[int, ...]], x: Callable[[int], float]) -> list[str]:
    """The sizes under a categorical x axis, slanted, and the axis's label."""
    out = []
    for i, size in enumerate(sizes):
        label = "x".join(map(str, size))
        out.append(f'<text x="{num(x(i))}" y="{HEIGHT - BOTTOM + 14}" text-anchor="end" '
                   f'transform="rotate(-30 {num(x(i))} {HEIGHT - BOTTOM + 14})">{escape(label)}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 4}" text-anchor="middle">size</text>')
    return out


def _series(impl: str, points: list[RatePoint], color: str, dashed: bool, x: Callable[[int], float],
            y: LinearScale) -> str:
    """One impl's band, line and points, in a group the impl toggles hide."""
    out = [f'<g class="impl" data-impl="{attr(impl)}">']
    if len(points) == 1:  # one size: the band is an error bar
        px, p = num(x(points[0].slot)), points[0]
        out.append(f'<line class="band" x1="{px}" x2="{px}" y1="{num(y(p.low))}" y2="{num(y(p.high))}" '
                   f'style="stroke:{color};stroke-width:8"/>')
    elif points:
        band = [(x(p.slot), p.high) for p in points] + [(x(p.slot), p.low) for p in reversed(points)]
        out.append(f'<polygon class="band" fill="{color}" points="{_path(band, y)}"/>')
        out.append(f'<polyline class="series{" baseline" if dashed else ""}" stroke="{color}" '
                   f'points="{_path([(x(p.slot), p.value) for p in points], y)}"/>')
    for p in points:
        out.append(f'<circle class="pt" cx="{num(x(p.slot))}" cy="{num(y(p.value))}" r="4" fill="{color}" '
                   f'data-value="{p.value:.6g}"><title>{escape(p.text)}</title></circle>')
    out.append("</g>")
    return "".join(out)


def _point_text(r: BenchResult, s: Stats, metric: Metric, value: float, lo: float, hi: float) -> str:
    m = r.measurement
    assert m is not None
    unit = {"gbps": "GB/s", "tflops": "TFLOP/s"}.get(metric.key, "µs")
    lines = [f"{r.impl} · {'x'.join(map(str, r.size))} · {r.dtype}",
             f"median {format_time(s.median)} (n={s.n}, p20-p80 {format_time(s.p20)}-{format_time(s.p80)})"]
    if metric is not TIME:
        lines.append(f"{value:.4g} {unit} (band {lo:.4g}-{hi:.4g})")
    if pct := plain(ceiling_text(m)):
        lines.append(f"{pct} of ceiling")
    return "\n".join(lines)


# --- roofline ---


def roofline_points(results: Sequence[BenchResult]) -> list[RooflinePoint]:
    """The timed results that have both bytes and FLOPs, placed on the roofline (report.roofline)."""
    return roofline.points(list(results))


def roofline_plots(results: Sequence[BenchResult]) -> list[str]:
    """One roofline <figure> per (device, mode) with points; empty when no result has both bytes and FLOPs."""
    groups: dict[tuple[str, str], list[RooflinePoint]] = {}
    for p in roofline_points(results):
        groups.setdefault((p.result.device, p.result.mode), []).append(p)
    return [roofline_plot(points) for points in groups.values()]


def roofline_plot(points: Sequence[RooflinePoint]) -> str:
    """Intensity against achieved FLOP/s on log axes, under the bandwidth roof and each dtype's compute roof."""
    ceilings = [p.result.measurement.ceiling for p in points if p.result.measurement.ceiling]  # type: ignore[union-attr]
    bw, peaks = roofline.compute_roofs(list(points))
    ridges = [peak / bw * 1e3 for peak in peaks] if bw else []
    xs = [p.ai for p in points] + ridges
    ys = [p.achieved for p in points] + list(peaks)
    x = LogScale(*decades(min(xs) / 2, max(xs) * 2), LEFT, WIDTH - RIGHT)
    y = LogScale(*decades(min(ys) / 2, max(ys) * 2), HEIGHT - BOTTOM, TOP)
    parts = _y_axis(y, [(t, si(t * 1e12, "")) for t in y.ticks()], "achieved FLOP/s")
    for t in x.ticks():
        px = num(x(t))
        parts.append(f'<line class="grid" x1="{px}" x2="{px}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>'
                     f'<text x="{px}" y="{HEIGHT - BOTTOM + 15}" text-anchor="middle">{t:g}</text>')
    parts.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 22}" text-anchor="middle">'
                 f'arithmetic intensity (FLOP/byte, from the cost model)</text>')
    parts += _roofs(bw, peaks, x, y)
    ops = list(dict.fromkeys(p.result.op for p in points))
    colors = {op: PALETTE[i % len(PALETTE)] for i, op in enumerate(ops)}
    for p in points:
        r = p.result
        roof = f' data-roof="{p.roof:.6g}"' if p.roof is not None else ""
        parts.append(f'<circle class="pt" cx="{num(x(p.ai))}" cy="{num(y(p.achieved))}" r="4.5" '
                     f'fill="{colors[r.op]}" data-impl="{attr(r.impl)}" data-ai="{p.ai:.6g}" '
                     f'data-tflops="{p.achieved:.6g}"{roof}><title>{escape(_roof_text(p))}</title></circle>')
    first = points[0].result
    names = sorted({p.result.measurement.device_name for p in points if p.result.measurement.device_name})  # type: ignore[union-attr]
    caption = (f"roofline · {first.mode} mode · {', '.join(names) or first.device}"
               + ("" if ceilings else " · no calibrated ceilings in these results"))
    return _figure(caption, parts, [(None, op, colors[op], False) for op in ops], interactive=False)


def _roofs(bw: float | None, peaks: dict[float, list[str]], x: LogScale, y: LogScale) -> list[str]:
    """The bandwidth roof (a diagonal: FLOP/s = bytes/s x intensity) bent flat at each compute ceiling."""
    out = []
    start = max(x.lo, y.lo / bw * 1e3) if bw else x.lo  # where the diagonal enters the plot
    for peak, kinds in sorted(peaks.items()) or [(None, [])]:
        line = []
        if bw:  # up to the ridge point, or to where the diagonal leaves the plot
            end = min(x.hi, (peak or y.hi) / bw * 1e3)
            line += [(start, bw * start / 1e3), (end, bw * end / 1e3)]
        if peak:
            line += [(x.hi, peak)] if line else [(x.lo, peak), (x.hi, peak)]
            out.append(f'<text x="{WIDTH - RIGHT - 4}" y="{num(y(peak) - 4)}" text-anchor="end">'
                       f'{escape("/".join(sorted(kinds)))} {escape(si(peak * 1e12, "FLOP/s"))} (calibrated)</text>')
        if len(line) >= 2:
            out.append(f'<polyline class="roof" points="{" ".join(f"{num(x(a))},{num(y(b))}" for a, b in line)}"/>')
    if bw:  # the bandwidth's label along the diagonal, halfway to the lowest ridge
        end = min(x.hi, (min(peaks) if peaks else y.hi) / bw * 1e3)
        at = math.sqrt(start * end)
        px, py = x(at), y(bw * at / 1e3) - 5
        angle = math.degrees(math.atan2(y(bw * end / 1e3) - y(bw * start / 1e3), x(end) - x(start)))
        out.append(f'<text x="{num(px)}" y="{num(py)}" text-anchor="middle" '
                   f'transform="rotate({angle:.1f} {num(px)} {num(py)})">{escape(si(bw * 1e9, "B/s"))} copy '
                   f'(calibrated)</text>')
    return out


def _roof_text(p: RooflinePoint) -> str:
    r = p.result
    lines = [f"{r.op} · {r.impl} · {'x'.join(map(str, r.size))} · {r.dtype}",
             f"intensity {p.ai:.4g} FLOP/byte", f"achieved {si(p.achieved * 1e12, 'FLOP/s')}"]
    if p.roof:
        lines.append(f"roof {si(p.roof * 1e12, 'FLOP/s')}: {p.achieved / p.roof:.1%} of it")
    if p.binding.bound:
        lines.append(f"{p.binding.bound}-bound" + (f" (ridge at {p.ridge:.3g} FLOP/byte)" if p.ridge else ""))
    return "\n".join(lines)


# --- shared pieces ---


def _y_axis(y: LinearScale | LogScale, ticks: list[tuple[float, str]], label: str) -> list[str]:
    out = [f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>',
           f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}"/>']
    for value, text in ticks:
        py = num(y(value))
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py}" y2="{py}"/>'
                   f'<text x="{LEFT - 5}" y="{py}" dy="0.32em" text-anchor="end">{escape(text)}</text>')
    middle = (TOP + HEIGHT - BOTTOM) / 2
    out.append(f'<text x="12" y="{middle}" text-anchor="middle" transform="rotate(-90 12 {middle})">'
               f'{escape(label)}</text>')
    return out


def _figure(caption: str, parts: list[str], legend: list[tuple[str | None, str, str, bool]],
            interactive: bool) -> str:
    """The SVG with a legend under the plot, in rows that fit its width, inside a <figure> with ``caption``."""
    items, row_x, row_y = [], LEFT, HEIGHT + 6
    for impl, label, color, dashed in legend:
        width = 34 + 7.0 * len(label)
        if row_x + width > WIDTH and row_x > LEFT:
            row_x, row_y = LEFT, row_y + LEGEND_ROW
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        mark = (f'<line x1="{num(row_x)}" x2="{num(row_x + 18)}" y1="{row_y}" y2="{row_y}" stroke="{color}" '
                f'stroke-width="2.5"{dash}/>')
        data = f' data-impl="{attr(impl)}"' if impl is not None and interactive else ""
        items.append(f'<g class="legend"{data}>{mark}<text x="{num(row_x + 23)}" y="{row_y}" dy="0.32em">'
                     f'{escape(label)}</text></g>')
        row_x += width
    height = row_y + LEGEND_ROW
    return (f'<figure><figcaption>{escape(caption)}</figcaption>'
            f'<svg class="plot" viewBox="0 0 {WIDTH} {height}" role="img">{"".join(parts + items)}</svg></figure>')


def _caption(results: Sequence[BenchResult]) -> str:
    first = results[0]
    names = sorted({r.measurement.device_name for r in results if r.measurement and r.measurement.device_name})
    text = f"{first.op} · {first.dtype} · {first.mode} mode · {', '.join(names) or first.device}"
    return text + (" · CPU timings: not GPU performance" if first.device == "cpu" else "")


def _path(points: list[tuple[float, float]], y: LinearScale) -> str:
    return " ".join(f"{num(px)},{num(y(v))}" for px, v in points if math.isfinite(v))
