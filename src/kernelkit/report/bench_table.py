"""Terminal view of benchmark results: one rich Table, rows grouped by (size, dtype), with how it was measured; the
lines under it (skips, failures, warnings); and the device's calibrated ceilings the rates are compared with.

Every row shows the median with its spread and n; the caption says the mode, the statistic and the device, and
says plainly when the timings are CPU timings.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from kernelkit.measure.measurement import SUSPECT_PCT, BenchResult, Measurement
from kernelkit.measure.stats import NOISY_IQR, Ratio
from kernelkit.report.check_table import stacked_status_text, status_text, worker_warning_lines
from kernelkit.report.roofline import binding
from kernelkit.results import BASELINE_NAMES as BASELINES
from kernelkit.results import Status, case_text, size_text
from kernelkit.units import format_bytes, format_time, three_digits  # noqa: F401 - the report's names for them

if TYPE_CHECKING:
    from kernelkit.measure.ceilings import Ceilings

LOW_CLOCKS = 0.9  # median SM clock under this fraction of the maximum: the GPU was throttled or idling down
def bench_table(results: Sequence[BenchResult], *, title: str = "", show_ci: bool = False, wide: bool = True) -> Table:
    """The results as a table: impl, size, dtype, median, spread, n, rates, which ceiling binds and % of it, peak
    memory (where measured), speedups, status, notes.

    Speedups are baseline median / impl median with a bootstrap verdict; ``show_ci`` adds the 95% interval.
    A message column appears when any result did not pass. ``wide=False``: the table that fits 120 columns
    (``compact_table``; the notes go below it, ``note_lines``).
    """
    if not wide:
        return compact_table(results, title=title)
    show_op = len({r.op for r in results}) > 1
    show_gpu = len({r.gpu for r in results}) > 1  # a run spread over several GPUs (--gpus, --ray)
    show_tflops = any(r.measurement and r.measurement.flops for r in results)
    show_bound = any(bound_text(r.measurement) for r in results)
    show_memory = any(r.measurement and r.measurement.peak_bytes is not None for r in results)
    vs = [name for name in BASELINES if any(name in r.speedups for r in results)]
    show_message = any(r.status is not Status.PASSED for r in results)
    table = Table(title=title or None, title_justify="left", caption=caption(results), caption_justify="left")
    columns = [*(["op"] if show_op else []), "impl", "size", "dtype", *(["gpu"] if show_gpu else []), "median",
               "p20-p80", "n", "GB/s",
               *(["TFLOP/s"] if show_tflops else []), *(["bound"] if show_bound else []), "% of ceiling",
               *(["peak mem"] if show_memory else []), *(f"vs {name}" for name in vs), "status", "notes",
               *(["message"] if show_message else [])]
    left = {"op", "impl", "size", "dtype", "bound", "status", "notes", "message"}
    wrapping = {"notes": 40}  # everything else stays on one line; a long message is cut (the CLI prints it whole)
    for name in columns:
        table.add_column(name, justify="left" if name in left else "right",
                         overflow="fold" if name in wrapping else "ellipsis", no_wrap=name not in wrapping,
                         max_width=wrapping.get(name, 48 if name == "message" else None))
    baselines = baseline_impls(results)
    for r in sectioned(table, ordered_results(results, baselines)):
        m = r.measurement if r.measurement is not None and r.measurement.samples else None
        cells = [*([escape(r.op)] if show_op else []), _impl_cell(r.impl, r.impl in baselines),
                 size_text(r), r.dtype, *([str(r.gpu)] if show_gpu else []),
                 *_timing_cells(m), rate_text(m.gbps if m else None),
                 *([rate_text(m.tflops if m else None)] if show_tflops else []),
                 *([bound_text(m)] if show_bound else []), ceiling_text(m),
                 *([format_bytes(m.peak_bytes if m else None)] if show_memory else []),
                 *(speedup_text(r.speedups.get(name), show_ci) for name in vs), status_text(r.status),
                 escape("; ".join(n for n in (notes_text(m), built_text(r)) if n)),
                 *([escape(_first_line(r.message))] if show_message else [])]
        table.add_row(*cells)
    return table


def sectioned(table: Table, results: Sequence[BenchResult]) -> Iterator[BenchResult]:
    """``results`` in turn, with a section line added to ``table`` where a new (op, size, dtype) group begins."""
    previous = None
    for r in results:
        group = (r.op, r.size, r.dtype)
        if previous is not None and group != previous:
            table.add_section()
        previous = group
        yield r


def compact_table(results: Sequence[BenchResult], *, title: str = "") -> Table:
    """The table that fits 120 columns on the built-in ops: impl, size, dtype, median ± half the p20-p80 spread (or
    the status of a row that was not timed), the nearer ceiling's rate and % of it, the speedups (↑ faster, ↓ slower,
    ~ within the interval). n, the bound, peak memory, notes and messages are in the wide table (``kernelkit bench
    --wide``); notes go below it (note_lines), failures' messages too (warning_lines)."""
    show_op = len({r.op for r in results}) > 1
    show_gpu = len({r.gpu for r in results}) > 1  # a run spread over several GPUs (--gpus, --ray)
    vs = [name for name in BASELINES if any(name in r.speedups for r in results)]
    table = Table(title=title or None, title_justify="left", caption=caption(results), caption_justify="left")
    columns = [*(["op"] if show_op else []), "impl", "size", "dtype", *(["gpu"] if show_gpu else []), "median",
               "rate", "% of ceiling", *(f"vs\n{name}" for name in vs)]
    for name in columns:
        table.add_column(name, justify="left" if name in ("op", "impl", "size", "dtype") else "right",
                         overflow="fold")
    baselines = baseline_impls(results)
    for r in sectioned(table, ordered_results(results, baselines)):
        m = r.measurement if r.measurement is not None and r.measurement.samples else None
        median, spread, _ = _timing_cells(m)
        timed = m is not None  # a SUSPECT row was timed: its median shows, the ceiling column says SUSPECT
        baseline = r.impl in baselines
        table.add_row(*([escape(r.op)] if show_op else []), f"[dim]{escape(r.impl)}[/]" if baseline else escape(r.impl),
                      size_text(r), SHORT_DTYPES.get(r.dtype, r.dtype),
                      *([str(r.gpu)] if show_gpu else []),
                      f"{median} {spread}".strip() if timed else stacked_status_text(r.status),
                      _rate_cell(m), _short_ceiling(m), *(_short_speedup(r.speedups.get(name)) for name in vs))
    return table


# The dtype names the compact table shows (`--dtypes` reads them too).
SHORT_DTYPES = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def _rate_cell(m: Measurement | None) -> str:
    """'123 GB/s' or '45.6 TFLOP/s': the rate whose ceiling is the nearer (GB/s when the op declares no FLOPs)."""
    if m is None:
        return ""
    c = m.ceiling
    flops_bind = c is not None and (c.pct_flops or 0) > (c.pct_bandwidth or 0)
    if m.tflops and (flops_bind or m.gbps is None):
        return f"{rate_text(m.tflops)} TFLOP/s"
    return f"{rate_text(m.gbps)} GB/s" if m.gbps is not None else ""


def _short_ceiling(m: Measurement | None) -> str:
    """ceiling_text in at most 12 characters: 'SUSPECT 134%' (red) leaves out which ceiling."""
    text = ceiling_text(m)
    return text.removesuffix(" bw[/]").removesuffix(" flops[/]") + "[/]" if text.startswith("[bold red]") else text


def _short_speedup(ratio: Ratio | None) -> str:
    """'1.85x ↑' (faster), '1420x ↑', '0.90x ↓' (slower), '1.01x ~' (the interval holds 1.0): three significant
    digits at most."""
    if ratio is None:
        return ""
    text, style = {"faster": ("↑", "green"), "slower": ("↓", "red")}.get(ratio.verdict, ("~", "dim"))
    value = f"{ratio.value:.0f}" if ratio.value >= 100 else three_digits(ratio.value)
    return f"[{style}]{value}x {text}[/]"


def note_lines(results: Sequence[BenchResult]) -> list[str]:
    """The notes the compact table leaves out, one line per row that has any (stopped early, noisy, throttled,
    dropped samples)."""
    baselines = baseline_impls(results)
    lines = []
    for r in ordered_results(results, baselines):
        m = r.measurement if r.measurement is not None and r.measurement.samples else None
        if text := notes_text(m):
            said = "; ".join(own_warnings(m)) if m is not None else ""
            text = text if not said else f"{text}: {said}"
            lines.append(f"[dim]note {escape(case_text(r))}: {escape(text)}[/]")
    return lines


def built_text(r: BenchResult) -> str:
    """'built in 8.1 s': what the row's first call cost where its check built it (torch.compile's compile)."""
    seconds = r.details.get("compile_seconds")
    return f"built in {seconds:.1f} s" if isinstance(seconds, (int, float)) and seconds > 0 else ""


def built_lines(results: Sequence[BenchResult]) -> list[str]:
    """One line under the table: what building the torch.compile baseline cost, in all and per case."""
    spent = sorted(float(r.details["compile_seconds"]) for r in results if built_text(r))
    if not spent:
        return []
    each = "" if len(spent) == 1 else (f" over {len(spent)} cases (median {spent[len(spent) // 2]:.1f} s, max "
                                       f"{spent[-1]:.1f} s)")
    return [f"[dim]torch.compile built its baseline in {sum(spent):.1f} s{each}; --no-compile leaves it out[/]"]


def caption(results: Sequence[BenchResult]) -> str:
    """'hot mode · median of n samples per row · NVIDIA H100 80GB HBM3': how and where every number was taken."""
    if not results:
        return "no results"
    modes = sorted({r.mode for r in results})
    names = sorted({r.measurement.device_name or r.device for r in results if r.measurement}) or sorted(
        {r.device for r in results})
    parts = [f"{'/'.join(modes)} mode", "median of n samples per row (spread p20-p80)", ", ".join(names)]
    if any(r.speedups for r in results):
        parts.append("vs X = median(X) / median(impl), 95% bootstrap CI decides faster (↑) / slower (↓) / ~")
    text = " · ".join(p for p in parts if p)
    if any(r.device == "cpu" for r in results):
        text += "\n[bold yellow]CPU timings: not GPU performance[/]"
    return text


def ceiling_text(m: Measurement | None) -> str:
    """'87% bw' or '62% flops': the % of the ceiling that binds (report.roofline; the higher one when the ceilings
    cannot tell); 'SUSPECT 134% bw' in red when either is above SUSPECT_PCT."""
    c = m.ceiling if m else None
    if c is None:
        return ""
    pcts = [(p, kind) for p, kind in ((c.pct_bandwidth, "bw"), (c.pct_flops, "flops")) if p is not None]
    if not pcts:
        return ""
    pct, kind = max(pcts)
    if pct > SUSPECT_PCT:
        return f"[bold red]SUSPECT {pct:.0f}% {kind}[/]"
    binds = binding(m)
    if binds.pct is not None:
        pct, kind = binds.pct, binds.kind
    return f"{pct:.0f}% {kind}"


def bound_text(m: Measurement | None) -> str:
    """'memory' or 'compute': which ceiling binds, from the cost model's intensity against the ridge point."""
    return binding(m).bound


def speedup_text(ratio: Ratio | None, show_ci: bool = False) -> str:
    """'1.85x faster' (green), '0.90x slower' (red), '1.01x ~' (dim: the interval holds 1.0)."""
    if ratio is None:
        return ""
    ci = f" [{ratio.low:.2f}, {ratio.high:.2f}]" if show_ci else ""
    text, style = {"faster": ("faster", "green"), "slower": ("slower", "red")}.get(ratio.verdict, ("~", "dim"))
    return f"[{style}]{ratio.value:.2f}x {text}{escape(ci)}[/]"


def notes_text(m: Measurement | None) -> str:
    """Why to trust a row less: not converged, noisy, throttled clocks, dropped samples, warnings."""
    if m is None:
        return ""
    notes = []
    if m.stop_reason != "converged":
        notes.append(f"stopped: {m.stop_reason}")
    stats = m.stats
    if stats.iqr_rel >= NOISY_IQR:
        notes.append(f"noisy: IQR {stats.iqr_rel:.0%} of median")
    scaling = m.clock_scaling
    if scaling is not None and scaling < LOW_CLOCKS:
        notes.append(f"clocks at {scaling:.0%} of max")
    if m.dropped:
        notes.append(f"{m.dropped} dropped")
    others = own_warnings(m)
    if others:
        notes.append(f"{len(others)} warning{'s' if len(others) > 1 else ''}")
    return "; ".join(notes)


def own_warnings(m: Measurement) -> list[str]:
    """The measurement's warnings that its notes do not already say (noisy, dropped samples)."""
    return [w for w in m.warnings if not w.startswith("noisy:") and "samples dropped" not in w]


def _timing_cells(m: Measurement | None) -> list[str]:
    if m is None:
        return ["", "", ""]
    s = m.stats
    spread = f"±{(s.p80 - s.p20) / 2 / s.median:.1%}" if s.median > 0 else ""
    return [format_time(s.median), spread, str(s.n)]


def baseline_impls(results: Sequence[BenchResult]) -> set[str]:
    """Impls marked as baselines, and any impl that other results' speedups are measured against (eager)."""
    return {r.impl for r in results if r.role == "baseline"} | {name for r in results for name in r.speedups}


def _impl_cell(impl: str, baseline: bool) -> str:
    return f"[dim]{escape(impl)} (baseline)[/]" if baseline else escape(impl)


def ordered_results(results: Sequence[BenchResult], baselines: set[str]) -> list[BenchResult]:
    """Grouped by op, then size (by element count), then dtype in first-seen order; impls before baselines."""
    ops = {op: i for i, op in enumerate(dict.fromkeys(r.op for r in results))}
    dtypes = {d: i for i, d in enumerate(dict.fromkeys(r.dtype for r in results))}
    order = {id(r): i for i, r in enumerate(results)}
    return sorted(results, key=lambda r: (ops[r.op], math.prod(r.size), r.size, dtypes[r.dtype],
                                          r.impl in baselines, order[id(r)]))


def rate_text(value: float | None) -> str:
    return "" if value is None else three_digits(value)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def skip_lines(results: Sequence[BenchResult]) -> list[str]:
    """One line per skipped impl and reason (not a table row per size and dtype)."""
    reasons: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.status is Status.SKIPPED:
            cases = reasons.setdefault((r.impl, r.message), [])
            if r.dtype not in cases:
                cases.append(r.dtype)
    return [f"[dim]skipped[/] {impl} ({', '.join(dtypes)}): {escape(reason)}"
            for (impl, reason), dtypes in reasons.items()]


def warning_lines(results: Sequence[BenchResult], *, notes_shown: bool = False, verbose: bool = False) -> list[str]:
    """Failures, each measurement's warnings (unless ``notes_shown``: note_lines said them, one line per case), then
    what the workers warned about (once each, with a count; library warnings counted unless ``verbose``)."""
    lines = [f"[red]{r.status.value}[/] {escape(case_text(r))}: {escape(r.message)}"
             for r in results if r.status.failed]
    for r in [] if notes_shown else results:
        for warning in (r.measurement.warnings if r.measurement else []):
            lines.append(f"[yellow]warning[/] {escape(case_text(r))}: {escape(warning)}")
    return lines + worker_warning_lines(results, verbose)


def log_lines(results: Sequence[BenchResult], lines: int = 20) -> list[str]:
    """Under the table: the tail of the worker's log for each failed result that kept one (each log once)."""
    shown: list[str] = []
    seen: set[str] = set()
    for r in results:
        log = str(r.details.get("log") or "").strip()
        if not r.status.failed or not log or log in seen:
            continue
        seen.add(log)
        tail = "\n".join(log.splitlines()[-lines:])
        shown.append(f"log of {escape(case_text(r))} ({r.status.value}), last lines:\n{escape(tail)}")
    return shown


def ceilings_table(ceilings: Ceilings) -> Table:
    """The calibrated ceilings of one device: copy bandwidth and each matmul rate, with how each was measured (what
    ran, its size, n, spread); the title says whether they were measured now or read from the cache, and when."""
    when = ceilings.measured_at.replace("T", " ").replace("+00:00", " UTC") or "unknown date"
    origin = f"cached ({when}; --force measures again)" if ceilings.cached else f"measured {when}"
    table = Table(title=f"ceilings of {escape(ceilings.device_name)}: {origin}", title_justify="left")
    for name in ("ceiling", "value", "how"):
        table.add_column(name, overflow="fold", max_width=70 if name == "how" else None)  # fits 120 columns
    table.add_row("copy bandwidth", f"{ceilings.copy_gbps:,.0f} GB/s", escape(how_text(ceilings.notes.get("copy"))))
    for kind, rate in ceilings.matmul_tflops.items():
        table.add_row(f"matmul {kind}", f"{rate:,.1f} TFLOP/s", escape(how_text(ceilings.notes.get(kind))))
    skipped = [f"{kind}: {note['skipped']}" for kind, note in ceilings.notes.items()
               if isinstance(note, dict) and "skipped" in note]
    if skipped:
        table.caption = escape("not measured: " + "; ".join(dict.fromkeys(skipped)))
        table.caption_justify = "left"
    return table


def how_text(note: object) -> str:
    """'y.copy_(x), 256 MiB, hot, n=41, spread 3%' from a ceiling's note (what ran, its size, n, IQR / median)."""
    if not isinstance(note, dict):
        return str(note or "")
    if "skipped" in note:
        return f"skipped: {note['skipped']}"
    size = note.get("size") or (f"{note['buffer_bytes'] / 2**20:.0f} MiB" if "buffer_bytes" in note else "")
    parts = [str(note.get("what", "")), size, str(note.get("mode", "")),
             f"n={note['n']}" if "n" in note else "",
             f"spread {note['iqr_rel']:.0%}" if isinstance(note.get("iqr_rel"), (int, float)) else ""]
    if note.get("shortage"):
        parts.append(str(note["shortage"]))
    return ", ".join(p for p in parts if p)
