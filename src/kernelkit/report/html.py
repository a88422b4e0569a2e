"""A benchmark run as one self-contained HTML page, to share instead of a terminal table.

The page holds, in order: the run (its command, when and how it ended) and its environment fingerprint; the
results table (sortable, filterable), each row with the command that re-runs that one case; the achieved GB/s or
TFLOP/s against size per (op, dtype), one line per impl with its p20-p80 band and the calibrated ceiling; the
roofline (arithmetic intensity against achieved FLOP/s, under the bandwidth and compute ceilings); each impl's
peak device memory against size, where it was measured; the statuses
(counts, every failure's message, the skips, the warnings); and, given another run, the per-case diff with the
verdicts of store.compare and the environment keys that differ.

It opens with no network: the style sheet, a small hand-written script and the SVG plots are inline, nothing is
linked, and a Content-Security-Policy forbids the browser any fetch. Without the script it still reads (native
tooltips, tables in their default order). Raw samples stay out: each case brings its median and p20/p80 only,
so a full built-in sweep (hundreds of cases) stays well under 5 MB.

render_report() is a pure function of plain data (RunData, and a store.RunComparison for the diff);
write_report() is the thin adapter that reads both from a results store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from kernelkit.measure.measurement import BenchResult
from kernelkit.report.bench_table import caption
from kernelkit.report.html_assets import CSS, JS
from kernelkit.report.html_plots import memory_plots, plain, rate_plots, roofline_plots
from kernelkit.report.html_tables import diff_section, env_table, results_table, status_section
from kernelkit.store import RunComparison, Store
from kernelkit.store import compare as compare_runs

# Everything inline, nothing fetched: not a script, a style sheet, a font, an image, nor a connection.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


@dataclass(frozen=True)
class RunData:
    """One run as the report shows it: what store.run() and store.results() give, as plain data."""

    id: int | str
    results: list[BenchResult]
    command: str = ""
    env: dict[str, Any] = field(default_factory=dict)
    started: str = ""
    finished: str | None = None
    status: str = ""  # finished | interrupted | failed | incomplete (killed) | running
    device: str = ""


def load_run(store: Store, ref: str | int) -> RunData:
    """The run ``ref`` names (an id, 'latest', -N) with every result, read from ``store``."""
    info = store.run(ref)
    return RunData(info.id, store.results(info.id), info.command, info.env, info.started, info.finished,
                   info.status, info.device)


def write_report(store: Store, run_ref: str | int = "latest", compare_ref: str | int | None = None,
                 path: str | Path = "report.html") -> Path:
    """Write the report of run ``run_ref`` to ``path``; with ``compare_ref``, diffed against that run (run A of
    store.compare, this run being B). Raises store.StoreError when a run does not resolve."""
    run = load_run(store, run_ref)
    comparison = compare_runs(store, compare_ref, run.id) if compare_ref is not None else None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(run, comparison), encoding="utf-8")
    return path


def render_report(run: RunData, compare: RunComparison | None = None) -> str:
    """The page of ``run``, as one HTML document; ``compare`` (store.compare(A, this run)) adds the diff."""
    results = run.results
    memories = memory_plots(results)
    sections = [
        ("environment", "Environment", env_table(run.env)),
        ("results", "Results", _how_measured(results) + results_table(results, run.command)),
        ("plots", "Achieved rate against size", _rate_section(rate_plots(results))),
        ("roofline", "Roofline", _roofline_section(roofline_plots(results))),
        *([("memory", "Peak memory against size", _memory_section(memories))] if memories else []),
        ("statuses", "Statuses", status_section(results)),
    ]
    if compare is not None:
        sections.append(("diff", f"Against run {compare.run_a.id}", diff_section(compare)))
    nav = "".join(f'<a href="#{key}">{escape(title)}</a>' for key, title, _ in sections)
    body = "".join(f'<section id="{key}"><h2>{escape(title)}</h2>{html}</section>' for key, title, html in sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(_title(run))}</title><style>{CSS}</style></head>\n"
            f"<body>{_header(run)}<nav>{nav}</nav>{body}<script>{JS}</script></body></html>\n")


def _rate_section(figures: list[str]) -> str:
    return _plots_section(figures, "Median per case, band p20-p80; dotted: the device's calibrated ceiling. Tick an "
                          "impl to hide or show it in every plot; hover a point for its numbers.",
                          empty="no timed results", controls='<div id="impl-toggles"></div>')


def _roofline_section(figures: list[str]) -> str:
    return _plots_section(figures, "x: FLOPs / bytes of the op's cost model; y: FLOPs / median time. The roof is the "
                          "lower of the copy bandwidth x intensity and the dtype's matmul ceiling.",
                          empty="no timed result has both a byte and a FLOP count")


def _memory_section(figures: list[str]) -> str:
    return _plots_section(figures, "Device memory one call allocated at its peak, above what was allocated before it "
                          "(torch.cuda.max_memory_allocated; torch's allocator only). Not measured on the CPU.")


def _plots_section(figures: list[str], note: str, empty: str = "", controls: str = "") -> str:
    """A section's note (HTML) over its figures, ``controls`` between them; ``empty`` alone when there is none."""
    if not figures and empty:
        return f'<p class="dim">{empty}</p>'
    return f'<p class="dim">{note}</p>{controls}<div class="plots">{"".join(figures)}</div>'


def _title(run: RunData) -> str:
    ops = ", ".join(dict.fromkeys(r.op for r in run.results)) or "no results"
    return f"kernelkit report · run {run.id} · {ops}" + (f" · {run.device}" if run.device else "")


def _header(run: RunData) -> str:
    ended = f"finished {run.finished}" if run.finished else "not finished (still running, or its process was killed)"
    passed = sum(r.status.ok for r in run.results)
    facts = " · ".join(p for p in (f"started {run.started}" if run.started else "",
                                   ended if run.started else "", f"status {run.status}" if run.status else "",
                                   f"{len(run.results)} results, {passed} passed") if p)
    command = f"<p>command: <code>{escape(run.command)}</code></p>" if run.command else ""
    return f"<header><h1>{escape(_title(run))}</h1><p class=\"dim\">{escape(facts)}</p>{command}</header>"


def _how_measured(results: list[BenchResult]) -> str:
    """The terminal table's caption (mode, statistic, device), and a banner when these are CPU timings."""
    lines = plain(caption(results)).splitlines()
    cpu = [line for line in lines if "CPU timings" in line]
    text = "".join(f'<p class="dim">{escape(line)}</p>' for line in lines if line not in cpu)
    return text + "".join(f'<p class="banner">{escape(line)}</p>' for line in cpu)
