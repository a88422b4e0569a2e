"""Terminal views of check results: one table, then the details of what did not pass, the skips and warnings."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelkit.results import CaseResult, Status, case_text, size_text

if TYPE_CHECKING:
    from kernelkit.results import RunReport

# The dtype names the tables that fit 120 columns show (`--dtypes` reads them too).
SHORT_DTYPES = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
STYLES = {
    Status.PASSED: "green",
    Status.SKIPPED: "dim",
    Status.WEAK: "yellow",
}


def status_text(status: Status) -> str:
    return f"[{STYLES.get(status, 'bold red')}]{status.value}[/]"


def stacked_status_text(status: Status) -> str:
    """status_text with its words on lines of their own (INCORRECT / NUMERICS): narrow columns for narrow tables."""
    return f"[{STYLES.get(status, 'bold red')}]{status.value.replace('_', chr(10))}[/]"


def results_table(results: Sequence[CaseResult], title: str = "", *, wide: bool = True) -> Table:
    """One row per case. ``wide=False``: the table that fits 120 columns (no backend, no note: the notes and
    failure messages are printed below it)."""
    show_seed = len({r.seed for r in results}) > 1
    table = Table(title=title or None, title_justify="left", show_lines=False)
    for name in ("op", "impl", *(["backend"] if wide else []), "size", "dtype", *(["seed"] if show_seed else []),
                 "status", "max abs err", "check time" if wide else "time", *(["note"] if wide else [])):
        table.add_column(name, justify="right" if name in ("max abs err", "check time", "time") else "left",
                         overflow="fold", max_width=60 if name == "note" else None)
    for r in results:
        err = "" if r.max_abs_err is None else f"{r.max_abs_err:.2e}"
        note = build_note(r.details) if r.status is Status.PASSED else _first_line(r.message)
        table.add_row(
            r.op, r.impl, *([r.backend] if wide else []), size_text(r),
            r.dtype if wide else SHORT_DTYPES.get(r.dtype, r.dtype),
            *([str(r.seed)] if show_seed else []), status_text(r.status) if wide else stacked_status_text(r.status),
            err, f"{r.seconds:.2f}s",
            *([escape(note)] if wide else []),
        )
    return table


def build_note(details: dict[str, Any]) -> str:
    """'autotuned: BLOCK_SIZE=1024, num_warps=4 (0.41 s)' / 'torch.compile: 5.2 s': what the first call built."""
    notes = []
    for kernel, tuning in details.get("autotune", {}).items():
        spent = f" ({tuning['tuning_s']:.2f} s)" if tuning.get("tuning_s") else ""
        notes.append(f"{kernel}: {tuning['config']}{spent}")
    if details.get("compile_seconds"):
        notes.append(f"torch.compile: {details['compile_seconds']:.1f} s")
    return "; ".join(notes)


def summary_line(results: Sequence[CaseResult], device: str, planned: int, interrupted: bool) -> str:
    counts = collections.Counter(r.status for r in results)
    parts = [f"{counts[s]} {s.value.lower()}" for s in Status if counts[s]]
    text = f"{len(results)} of {planned} cases on {device}: " + (", ".join(parts) or "none run")
    if interrupted:
        text += " (interrupted: the cases not listed did not run)"
    return text


def print_report(console: Console, results: Sequence[CaseResult], device: str, planned: int,
                 interrupted: bool = False, title: str = "", *, wide: bool = False, verbose: bool = False) -> None:
    """The table (``wide``: with the backend and note columns; else the notes of passed cases below it), the
    details of every case that failed, the skip reasons grouped, and a summary line."""
    if results:
        console.print(results_table(results, title, wide=wide))
    notes = [] if wide else [(case_text(r), note) for r in results
                             if r.status is Status.PASSED and (note := build_note(r.details))]
    for case, note in notes:
        console.print(f"[dim]note {escape(case)}: {escape(note)}[/]", highlight=False)
    failed = [r for r in results if r.status.failed]
    for r in failed:
        console.print(f"\n{status_text(r.status)} [bold]{escape(case_text(r))}[/]")
        console.print(escape(r.message), highlight=False)
        if r.log.strip():
            console.print("[dim]worker output:[/]")
            console.print(escape(_tail(r.log, 20)), highlight=False, style="dim")
    skipped = collections.Counter((r.impl, r.message) for r in results if r.status is Status.SKIPPED)
    if skipped:
        console.print("\n[dim]skipped:[/]")
        for (impl, reason), n in skipped.items():
            console.print(f"  [dim]{escape(impl)} ({n} case{'s' if n > 1 else ''}): {escape(reason)}[/]")
    warned = worker_warning_lines(results, verbose)
    if warned:
        console.print()
        for line in warned:
            console.print(line, highlight=False)
    console.print("\n" + summary_line(results, device, planned, interrupted), highlight=False)


def worker_warning_lines(results: Sequence[Any], verbose: bool = False) -> list[str]:
    """What the workers warned about, once per warning, with the case it came from (and how many more); warnings
    from installed libraries (their deprecations) in one line with a count, each shown only when ``verbose``."""
    from kernelkit.jobs import LIBRARY_MARK

    cases: dict[str, list[str]] = {}
    for r in results:
        for warning in getattr(r, "warnings", []):
            cases.setdefault(warning, []).append(case_text(r))
    lines, library = [], []
    for warning, where in cases.items():
        if warning.startswith(LIBRARY_MARK) and not verbose:
            library.append(warning)
            continue
        origin = where[0] if len(where) == 1 else f"{where[0]} and {len(where) - 1} more"
        lines.append(f"[yellow]warning[/] ({escape(origin)}): {escape(warning.removeprefix(LIBRARY_MARK))}")
    if library:
        kinds = sorted({w.removeprefix(LIBRARY_MARK).split(":", 1)[0] for w in library})
        lines.append(f"[dim]{len(library)} library warning{'s' if len(library) > 1 else ''} ({', '.join(kinds)}); "
                     "--verbose shows them[/]")
    return lines


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def check_json(report: RunReport, version: str) -> dict[str, object]:
    """The check report as ``kernelkit check --json`` prints it (``version``: kernelkit's): the run, then every
    result."""
    import torch

    return {
        "device": report.device,
        "gpu": torch.cuda.get_device_name() if report.device == "cuda" else None,
        "planned": report.planned,
        "interrupted": report.interrupted,
        "strict": report.strict,
        "path": report.path,  # which path judged the run, and why (strict mode or the fast path)
        "torch": torch.__version__,
        "kernelkit": version,
        "results": [r.to_dict() for r in report.results],
    }
