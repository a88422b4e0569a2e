"""The HTML report's tables: the results (with each row's repro command), the statuses, the environment, and the
per-case diff against another run. Every cell is text escaped here; numeric cells carry ``data-v`` (the raw number)
so the page's script sorts them as numbers.
"""

from __future__ import annotations

import collections
import json
import math
import shlex
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from kernelkit.measure.measurement import BenchResult
from kernelkit.measure.stats import Ratio
from kernelkit.report.bench_table import (
    baseline_impls,
    bound_text,
    ceiling_text,
    format_bytes,
    format_time,
    notes_text,
    ordered_results,
    rate_text,
)
from kernelkit.report.html_plots import attr, plain
from kernelkit.results import BASELINE_NAMES as BASELINES
from kernelkit.results import Status, size_text
from kernelkit.store import CaseChange, RunComparison

MESSAGE_LIMIT = 4000  # characters of one failure message kept on the page: a long traceback's end says enough
LOG_LINES = 20  # lines of a failed worker's output kept
# Options of `kernelkit bench` that take no value (the rest take one): needed to find the target in a command.
BENCH_FLAGS = {"--graph-warm", "--no-store", "--baselines", "--no-baselines", "--compile", "--no-compile", "--strict",
               "--no-strict", "--wide", "--calibrate", "--no-calibrate", "--verbose", "-v"}
# Options a one-case repro replaces (the case's own impl, size, dtype, mode, device) or drops (output files).
REPLACED = {"--impl", "-i", "--sizes", "--dtypes", "--mode", "--device", "--json", "--csv", "--plot"}


def cell(text: object, value: float | None = None, cls: str = "", title: str = "") -> str:
    """A <td>: numeric when ``value`` is given (right-aligned, sorted by it; None sorts last)."""
    numeric = value is not None or "num" in cls.split()
    classes = " ".join(dict.fromkeys([*cls.split(), *(["num"] if numeric else [])]))
    html = f' class="{classes}"' if classes else ""
    if numeric:
        html += f' data-v="{value:.9g}"' if value is not None else ' data-v=""'
    if title:
        html += f' title="{attr(title)}"'
    return f"<td{html}>{escape(str(text))}</td>"


def clipped(text: str) -> str:
    """A cell kept to one line (the row stays short); the whole text is its tooltip."""
    return cell(_first_line(text), cls="clip", title=text.strip()[:MESSAGE_LIMIT])


def table(table_id: str, columns: Sequence[str], rows: Iterable[str], *, filter_hint: str = "") -> str:
    """A sortable table in a scrolling box, with a text filter over its rows when ``filter_hint`` is given."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    filt = (f'<input class="filter" type="search" data-table="{attr(table_id)}" placeholder="{attr(filter_hint)}">'
            if filter_hint else "")
    return (f'{filt}<div class="scroll"><table id="{attr(table_id)}" class="sortable"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def status_cell(status: Status | str | None) -> str:
    if status is None:
        return cell("-")
    value = status.value if isinstance(status, Status) else str(status)
    return f'<td class="st st-{_kind(value)}">{escape(value)}</td>'


# --- results ---


def results_table(results: Sequence[BenchResult], run_command: str) -> str:
    """Every result, grouped by op, size and dtype (sortable by any column), with the command that re-runs it.

    The op and mode columns appear when the run has several, a "vs" column when some row was timed against that
    baseline. A timed row's notes say why to trust it less; an
    untimed row's, why it was not timed (the first line of its message; all of it in the tooltip).
    """
    baselines = baseline_impls(results)
    rows = [_result_cells(r, r.impl in baselines, repro_command(run_command, r))
            for r in ordered_results(results, baselines)]
    hidden = {name for name, values in (("op", {r.op for r in results}), ("mode", {r.mode for r in results}))
              if len(values) < 2}
    hidden |= {f"vs {b}" for b in BASELINES if not any(b in r.speedups for r in results)}
    hidden |= set() if any(bound_text(r.measurement) for r in results) else {"bound"}
    hidden |= set() if any(r.measurement and r.measurement.peak_bytes is not None for r in results) else {"peak mem"}
    columns = [c for c in (rows[0] if rows else {"impl": ""}) if c not in hidden]
    body = ("<tr>" + "".join(row[c] for c in columns) + "</tr>" for row in rows)
    return table("results-table", columns, body, filter_hint="filter rows: e.g. softmax float16 triton")


def _result_cells(r: BenchResult, baseline: bool, repro: str) -> dict[str, str]:
    """Column name -> <td> of one result; timing cells are empty when it was not timed."""
    m = r.measurement if r.measurement is not None and r.measurement.samples else None
    s = m.stats if m else None
    c = m.ceiling if m else None
    pcts = [p for p in ((c.pct_bandwidth, c.pct_flops) if c else ()) if p is not None]
    pct = plain(ceiling_text(m))
    spread = (s.p80 - s.p20) / 2 / s.median if s and s.median > 0 else None
    # Rates from this one summary: Measurement.gbps/.tflops summarize the samples again on every read.
    gbps = m.bytes / s.median / 1e9 if m and s and m.bytes and s.median > 0 else None
    tflops = m.flops / s.median / 1e12 if m and s and m.flops and s.median > 0 else None
    return {
        "op": cell(r.op),
        "impl": cell(f"{r.impl} (baseline)" if baseline else r.impl),
        "size": cell(size_text(r), float(math.prod(r.size))),
        "dtype": cell(r.dtype),
        "mode": cell(r.mode),
        "status": status_cell(r.status),
        "median": cell(format_time(s.median) if s else "", s.median if s else None, "num"),
        "p20-p80": cell(f"±{spread:.1%}" if spread is not None else "", spread, "num"),
        "n": cell(s.n if s else "", s.n if s else None, "num"),
        "GB/s": cell(rate_text(gbps), gbps, "num"),
        "TFLOP/s": cell(rate_text(tflops), tflops, "num"),
        "bound": cell(bound_text(m)),
        "% of ceiling": cell(pct, max(pcts) if pcts else None, "num suspect" if pct.startswith("SUSPECT") else "num"),
        "peak mem": cell(format_bytes(m.peak_bytes if m else None), m.peak_bytes if m else None, "num"),
        **{f"vs {b}": speedup_cell(r.speedups.get(b)) for b in BASELINES},
        "notes": clipped(notes_text(m) if m else r.message),
        "repro": f'<td class="clip wide" title="{attr(repro)}"><code class="repro">{escape(repro)}</code></td>',
    }


def speedup_cell(ratio: Ratio | None) -> str:
    """'1.85x faster' / '0.90x slower' / '1.01x ~' (the 95% interval holds 1.0), the interval as its tooltip."""
    if ratio is None:
        return cell("", None, "num")
    word = {"faster": "faster", "slower": "slower"}.get(ratio.verdict, "~")
    return cell(f"{ratio.value:.2f}x {word}", ratio.value, f"num v-{ratio.verdict}",
                f"95% CI [{ratio.low:.3f}, {ratio.high:.3f}]")


def repro_command(run_command: str, result: BenchResult) -> str:
    """The command that re-runs one case: the run's `kernelkit bench` command narrowed to this impl, size, dtype,
    mode and device, without its output files. The target is the run's own (a user file's path) when it had one,
    the op's name when it named several; a run started from Python gives the built-in op's command (a user file's
    op needs its path in place of the op name).
    """
    targets, options = _bench_command(run_command)
    target = targets[0] if len(targets) == 1 and result.op not in targets else result.op
    words = ["kernelkit", "bench", target, *options, "--impl", result.impl, "--sizes", "x".join(map(str, result.size)),
             "--dtypes", result.dtype, "--mode", result.mode, "--device", result.device]
    return shlex.join(words)


def _bench_command(command: str) -> tuple[list[str], list[str]]:
    """The targets of a `kernelkit bench ...` command and the options a repro keeps; ([], []) for other commands."""
    try:
        words = shlex.split(command)
    except ValueError:
        return [], []
    if len(words) < 2 or words[1] != "bench":
        return [], []
    targets, kept, i = [], [], 2
    while i < len(words):
        word = words[i]
        takes_value = word.startswith("-") and "=" not in word and word not in BENCH_FLAGS
        if not word.startswith("-"):
            targets.append(word)
        elif word.split("=", 1)[0] not in REPLACED:
            kept += words[i:i + 2] if takes_value else [word]
        i += 2 if takes_value else 1
    return targets, kept


# --- statuses ---


def status_section(results: Sequence[BenchResult]) -> str:
    """Counts by status, every failure with its message (and its worker's output), the skips by reason, warnings."""
    counts = collections.Counter(r.status for r in results)
    badges = "".join(f'<span class="badge"><span class="st st-{_kind(s.value)}">{s.value}</span> {counts[s]}</span>'
                     for s in Status if counts[s])
    out = [f"<p>{badges or 'no results'}</p>"]
    failed = [r for r in results if r.status.failed]
    if failed:
        rows = []
        for r in failed:
            log = str(r.details.get("log", "") or "")
            tail = "\n".join(log.rstrip().splitlines()[-LOG_LINES:])
            extra = (f"<details><summary>worker output (last {LOG_LINES} lines)</summary><pre class=\"msg\">"
                     f"{escape(tail)}</pre></details>" if tail else "")
            rows.append(f"<tr>{cell(r.case_id)}{cell(r.mode)}{status_cell(r.status)}<td><pre class=\"msg\">"
                        f"{escape(_clip(r.message))}</pre>{extra}</td></tr>")
        out += ["<h3>failed</h3>", table("failures-table", ["case", "mode", "status", "message"], rows)]
    skipped: dict[tuple[str, str], list[BenchResult]] = {}
    for r in results:
        if r.status is Status.SKIPPED:
            skipped.setdefault((r.impl, r.message), []).append(r)
    if skipped:
        items = "".join(f"<li><b>{escape(impl)}</b> ({len(rs)} case{'s' if len(rs) > 1 else ''}, "
                        f"{escape(', '.join(dict.fromkeys(r.dtype for r in rs)))}): {escape(_clip(reason))}</li>"
                        for (impl, reason), rs in skipped.items())
        out.append(f"<h3>skipped</h3><ul>{items}</ul>")
    warnings = _warnings(results)
    if warnings:
        out.append("<h3>warnings</h3><ul>" + "".join(f"<li>{escape(w)}</li>" for w in warnings) + "</ul>")
    return "".join(out)


def _warnings(results: Sequence[BenchResult]) -> list[str]:
    """Each measurement's warnings, then what the workers warned about (once each, with the cases it touched)."""
    lines = [f"{r.case_id}: {w}" for r in results if r.measurement for w in r.measurement.warnings]
    worker: dict[str, list[str]] = {}
    for r in results:
        for w in r.warnings:
            worker.setdefault(w, []).append(r.case_id)
    for w, cases in worker.items():
        where = cases[0] if len(cases) == 1 else f"{cases[0]} and {len(cases) - 1} more"
        lines.append(f"({where}): {w}")
    return lines


# --- environment ---


def env_table(env: dict[str, Any]) -> str:
    """The fingerprint, key and value side by side in columns, in its own order; unknown values (None) as '-'."""
    items = "".join(f'<div><span class="k">{escape(str(k))}</span>{escape(_value(v))}</div>' for k, v in env.items())
    return f'<div class="env-grid">{items}</div>' if items else '<p class="dim">no environment recorded</p>'


def _value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


# --- diff ---


def diff_section(comparison: RunComparison) -> str:
    """This run (B) against the other (A): verdict counts, the environment keys that differ, and every case."""
    a, b = comparison.run_a, comparison.run_b
    verdicts = collections.Counter(c.verdict or "not compared" for c in comparison.changes)
    badges = "".join(f'<span class="badge v-{attr(v)}">{escape(v)} {n}</span>' for v, n in verdicts.items())
    out = [f"<p>A = run {escape(str(a.id))} ({escape(a.started)}): <code>{escape(a.command)}</code><br>"
           f"B = this run {escape(str(b.id))} ({escape(b.started)}). A/B = median(A) / median(B): above 1, this "
           f"run is faster; faster or slower only when the 95% bootstrap interval excludes 1.0.</p><p>{badges}</p>"]
    if comparison.env_diffs:
        rows = "".join(f"<tr><td>{escape(d.key)}</td><td>{escape(_value(d.a))}</td><td>{escape(_value(d.b))}</td>"
                       f"</tr>" for d in comparison.env_diffs)
        out.append('<p class="banner">The environments differ: the runs may not be comparable.</p>'
                   f'<table class="env"><thead><tr><th>key</th><th>A</th><th>B</th></tr></thead>{rows}</table>')
    rows = [_change_row(c) for c in comparison.changes]
    columns = ["case", "mode", "status A", "status B", "A median", "B median", "A/B", "95% CI", "verdict", "note"]
    out.append(table("diff-table", columns, rows, filter_hint="filter cases: e.g. slower"))
    return "".join(out)


def _change_row(c: CaseChange) -> str:
    ratio = c.ratio
    verdict = c.verdict or "-"
    return "<tr>" + "".join([
        cell(c.case), cell(c.mode), status_cell(c.status_a), status_cell(c.status_b),
        cell(format_time(c.median_a) or "-", c.median_a, "num"),
        cell(format_time(c.median_b) or "-", c.median_b, "num"),
        cell(f"{ratio.value:.3f}" if ratio else "-", ratio.value if ratio else None, "num"),
        cell(f"[{ratio.low:.3f}, {ratio.high:.3f}]" if ratio else "-"),
        f'<td class="v-{attr(verdict)}">{escape(verdict)}</td>', cell(c.note),
    ]) + "</tr>"


def _kind(status: str) -> str:
    """The colour class of a status: its own for the three that are not failures, 'bad' for every failure."""
    return status if status in ("PASSED", "SKIPPED", "WEAK") else "bad"


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else f"... ({len(text) - MESSAGE_LIMIT} characters cut)\n" + text[
        -MESSAGE_LIMIT:]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
