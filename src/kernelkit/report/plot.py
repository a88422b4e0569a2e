"""Benchmark plots: achieved rate against size, one figure per (op, dtype, mode), with the measured ceiling.

matplotlib is an optional extra (``pip install kernelkit[plot]``); it is imported only when a plot is drawn, and
figures are built on matplotlib.figure.Figure with an Agg canvas, so pyplot's global state is never touched.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelkit.errors import BackendUnavailable
from kernelkit.measure.measurement import BenchResult, Ceiling
from kernelkit.report.bench_table import baseline_impls

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Ceilings = Ceiling | Mapping[str, Ceiling] | None  # one for every dtype, or one per dtype name


@dataclass(frozen=True)
class Metric:
    """What a figure's y axis shows: a rate from the cost model (higher is better) or, lacking one, the time."""

    key: str  # "gbps" | "tflops" | "time"
    label: str

    def value(self, result: BenchResult, seconds: float) -> float:
        m = result.measurement
        assert m is not None
        if seconds <= 0:
            return math.nan
        if self.key == "gbps":
            return (m.bytes or 0) / seconds / 1e9
        if self.key == "tflops":
            return (m.flops or 0) / seconds / 1e12
        return seconds * 1e6


GBPS = Metric("gbps", "achieved GB/s")
TFLOPS = Metric("tflops", "achieved TFLOP/s")
TIME = Metric("time", "time per call (µs)")


def plot_results(results: Sequence[BenchResult], out_dir: str | Path, *, ceilings: Ceilings = None) -> list[Path]:
    """Draw the figures of the timed results and save each as PNG and SVG in ``out_dir``:

    - ``<op>_<dtype>_<mode>``: the achieved rate against size, one line per impl (build_figure);
    - ``<op>_<dtype>_<mode>_roofline``: intensity against achieved FLOP/s under the calibrated ceilings, when the
      cost model gives bytes and FLOPs; ``roofline_<mode>``: every op on one roofline, when there are several;
    - ``<op>_<dtype>_<mode>_memory``: each impl's peak device memory against size, when it was measured.

    ``_<device>`` is appended when the results come from more than one device. ``ceilings`` fills in the rate
    figures' ceiling line where the results carry none (results of an uncalibrated run). Returns the written
    paths, PNG then SVG for each figure. Raises BackendUnavailable without matplotlib.
    """
    from kernelkit.report.roofline_plot import build_roofline_figure, roofline_groups

    _import_matplotlib()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    groups = plot_groups(results)
    several_devices = len({device for *_, device in groups}) > 1
    for (op, dtype, mode, device), group in groups.items():
        suffix = f"_{device}" if several_devices else ""
        paths += _save(build_figure(group, ceilings=ceilings), out, f"{op}_{dtype}_{mode}{suffix}")
        if any(r.measurement.peak_bytes is not None for r in group):  # type: ignore[union-attr]
            paths += _save(build_memory_figure(group), out, f"{op}_{dtype}_{mode}_memory{suffix}")
    for key, found in roofline_groups(results).items():
        combined = len(key) == 2
        stem = f"roofline_{key[0]}" if combined else f"{key[0]}_{key[1]}_{key[2]}_roofline"
        paths += _save(build_roofline_figure(found, combined=combined), out,
                       stem + (f"_{key[-1]}" if several_devices else ""))
    return paths


def _save(fig: Figure, out: Path, stem: str) -> list[Path]:
    """``fig`` as <stem>.png and <stem>.svg; text stays text in the SVG (searchable), with no date in it."""
    matplotlib = _import_matplotlib()
    paths = []
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "kernelkit"}):  # restored afterwards
        for ext, metadata in (("png", {}), ("svg", {"Date": None})):
            path = out / f"{_safe(stem)}.{ext}"
            fig.savefig(path, format=ext, dpi=120, metadata=metadata)
            paths.append(path)
    return paths


def build_figure(results: Sequence[BenchResult], *, ceilings: Ceilings = None) -> Figure:
    """The figure of one (op, dtype, mode) group: a line per impl (baselines dashed) with a p20-p80 band, x = size.

    The band spans the rate at the p80 time to the rate at the p20 time. Results with no samples are left out.
    """
    _import_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    timed = [r for r in results if r.measurement is not None and r.measurement.samples]
    fig = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    metric = choose_metric(timed)
    sizes = ordered_sizes(timed)
    baselines = baseline_impls(timed)
    for impl, rows in _by_impl(timed).items():
        rows.sort(key=lambda r: sizes.index(r.size))
        xs, ys, lo, hi = [], [], [], []
        for r in rows:
            s = r.measurement.stats  # type: ignore[union-attr]
            xs.append(sizes.index(r.size))
            ys.append(metric.value(r, s.median))
            # A rate falls as time grows: the p80 time gives the band's low edge (for time itself, its high edge).
            lo.append(metric.value(r, s.p80))
            hi.append(metric.value(r, s.p20))
        dashed = impl in baselines
        (line,) = ax.plot(xs, ys, marker="o", linestyle="--" if dashed else "-",
                          label=f"{impl} (baseline)" if dashed else impl)
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0, label=f"_{impl} p20-p80")
    roof = ceiling_line(timed, metric, ceilings)
    if roof:
        value, label = roof
        ax.axhline(value, color="black", linestyle=":", linewidth=1.2, label=label)
    ax.set_xticks(range(len(sizes)), ["x".join(map(str, s)) for s in sizes], rotation=30 if len(sizes) > 4 else 0)
    ax.set_xlabel("size")
    ax.set_ylabel(f"{metric.label} (median; band p20-p80)")
    ax.margins(y=0.1)  # headroom above the ceiling line
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if timed:
        ax.legend(loc="best", fontsize="small")
    ax.set_title(_title(timed), fontsize="medium")
    return fig


def build_memory_figure(results: Sequence[BenchResult]) -> Figure:
    """Peak device memory of one call (measure.memory) against size, a line per impl (baselines dashed): what grows
    as the square of the size (a materialized score matrix) stands apart from what grows linearly."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    measured = [r for r in results if r.measurement is not None and r.measurement.peak_bytes is not None]
    fig = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    sizes = ordered_sizes(measured)
    baselines = baseline_impls(measured)
    for impl, rows in _by_impl(measured).items():
        rows.sort(key=lambda r: sizes.index(r.size))
        dashed = impl in baselines
        ax.plot([sizes.index(r.size) for r in rows], [r.measurement.peak_bytes / 2**20 for r in rows],  # type: ignore[union-attr]
                marker="o", linestyle="--" if dashed else "-", label=f"{impl} (baseline)" if dashed else impl)
    ax.set_xticks(range(len(sizes)), ["x".join(map(str, s)) for s in sizes], rotation=30 if len(sizes) > 4 else 0)
    ax.set_xlabel("size")
    ax.set_ylabel("peak device memory of one call (MiB)")
    if measured and max(r.measurement.peak_bytes for r in measured) > 0:  # type: ignore[union-attr]
        ax.set_yscale("symlog", linthresh=1.0)  # MiB to GiB on one axis; zero stays drawable
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if measured:
        ax.legend(loc="best", fontsize="small")
    ax.set_title(_title(measured).replace(" mode ·", " mode · peak memory ·", 1) +
                 "\nabove what was allocated before the call (torch.cuda.max_memory_allocated)", fontsize="medium")
    return fig


def choose_metric(results: Sequence[BenchResult]) -> Metric:
    """TFLOP/s when the results carry flops and sit closer to the flops ceiling than to bandwidth (compute-bound,
    by majority of the results that have both percentages); else GB/s when they carry bytes; else the time."""
    ms = [r.measurement for r in results if r.measurement is not None]
    has_bytes, has_flops = any(m.bytes for m in ms), any(m.flops for m in ms)
    if has_flops:
        votes = [(m.ceiling.pct_flops or 0) > (m.ceiling.pct_bandwidth or 0)
                 for m in ms if m.flops and m.ceiling and m.ceiling.pct_flops is not None]
        if (votes and 2 * sum(votes) > len(votes)) or not has_bytes:
            return TFLOPS
    return GBPS if has_bytes else TIME


def ceiling_line(results: Sequence[BenchResult], metric: Metric, ceilings: Ceilings) -> tuple[float, str] | None:
    """The ceiling line for ``metric``: the results' own calibrated ceiling, else the one given to plot_results."""
    if metric is TIME or not results:
        return None
    found = [r.measurement.ceiling for r in results if r.measurement and r.measurement.ceiling]
    if isinstance(ceilings, Ceiling):
        found.append(ceilings)
    elif ceilings is not None and results[0].dtype in ceilings:
        found.append(ceilings[results[0].dtype])
    for c in found:
        if metric is GBPS and c.bandwidth_gbps:
            return c.bandwidth_gbps, f"copy ceiling {c.bandwidth_gbps:.0f} GB/s (calibrated)"
        if metric is TFLOPS and c.tflops:
            kind = f"{c.flops_kind} " if c.flops_kind else ""
            return c.tflops, f"{kind}matmul ceiling {c.tflops:.0f} TFLOP/s (calibrated)"
    return None


def _title(results: Sequence[BenchResult]) -> str:
    if not results:
        return "no timed results"
    first = results[0]
    names = sorted({r.measurement.device_name for r in results if r.measurement and r.measurement.device_name})
    title = f"{first.op} · {first.dtype} · {first.mode} mode · {', '.join(names) or first.device}"
    if any(r.device == "cpu" for r in results):
        title += "\nCPU timings: not GPU performance"
    return title


def plot_groups(results: Sequence[BenchResult]) -> dict[tuple[str, str, str, str], list[BenchResult]]:
    """Timed results by (op, dtype, mode, device): timings of different modes or devices never share a line."""
    groups: dict[tuple[str, str, str, str], list[BenchResult]] = {}
    for r in results:
        if r.measurement is not None and r.measurement.samples:
            groups.setdefault((r.op, r.dtype, r.mode, r.device), []).append(r)
    return groups


def _by_impl(results: Sequence[BenchResult]) -> dict[str, list[BenchResult]]:
    rows: dict[str, list[BenchResult]] = {}
    for r in results:
        rows.setdefault(r.impl, []).append(r)
    return rows


def ordered_sizes(results: Sequence[BenchResult]) -> list[tuple[int, ...]]:
    """Distinct sizes by the case's bytes when every size has them, else by element count."""
    bytes_of: dict[tuple[int, ...], int] = {}
    for r in results:
        b = (r.measurement.bytes if r.measurement else None) or 0
        bytes_of[r.size] = max(b, bytes_of.get(r.size, 0))
    use_bytes = all(bytes_of.values())
    return sorted(bytes_of, key=lambda s: (bytes_of[s] if use_bytes else math.prod(s), math.prod(s), s))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)


def _import_matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise BackendUnavailable(
            "plots need matplotlib, which is not installed: pip install 'kernelkit[plot]' (or pip install matplotlib)"
        ) from exc
    return matplotlib
