"""The measurement commands of the CLI (bench, calibrate, runs, compare): parse arguments, call the library, print."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from kernelkit.cli_profile import TargetArg, fail
from kernelkit.errors import KernelkitError
from kernelkit.results import Status

StoreOpt = Annotated[Path | None, typer.Option("--store", help="The results database; default: in the cache dir.")]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu or cuda; default: cuda when a GPU is visible.")]


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_command)
    app.command("calibrate")(calibrate_command)
    app.command("runs")(runs_command)
    app.command("compare")(compare_command)


def bench_command(
    target: TargetArg,
    impl: Annotated[list[str] | None, typer.Option("--impl", "-i", help="Impl to time (repeatable); default: all. "
                                                   "Name eager/compile to time only those baselines.")] = None,
    sizes: Annotated[str | None, typer.Option(help="Comma-separated shapes; default: the op's bench sizes.")] = None,
    dtypes: Annotated[str | None, typer.Option(help="Comma-separated dtypes; default: the op's.")] = None,
    mode: Annotated[str, typer.Option(help="cold (cache evicted per sample), hot (back-to-back calls), graph "
                                           "(CUDA-graph replay, cold) or kernel (the kernels' device time).")]
    = "cold",
    graph_warm: Annotated[bool, typer.Option("--graph-warm", help="Graph mode without rotating input copies: "
                                             "replays read warm L2 when the inputs fit.")] = False,
    device: DeviceOpt = None,
    budget: Annotated[float | None, typer.Option(help="Seconds of sampling per impl and case, at most; "
                                                  "default 10 on a GPU, 0.3 on the CPU.")] = None,
    rse: Annotated[float, typer.Option(help="Stop when the median's relative standard error is under this.")] = 0.005,
    baselines: Annotated[bool, typer.Option(help="Time eager PyTorch and torch.compile alongside.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds before a correctness check is killed.")] = 60.0,
    store: StoreOpt = None,
    no_store: Annotated[bool, typer.Option("--no-store", help="Do not record the run.")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write every result, raw samples too.")] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Write one CSV row per result.")] = None,
    plot_dir: Annotated[Path | None, typer.Option("--plot", help="Save a PNG and SVG per op and dtype here.")] = None,
) -> None:
    """Time every impl of an op against eager PyTorch and torch.compile, after checking each against the reference.

    Each (size, dtype) runs in a worker process. Prints medians with their spread, GB/s and TFLOP/s from the
    op's cost model, % of the device's calibrated ceilings, and speedups with 95% bootstrap intervals.
    Exit code: 0 when every case that ran was correct and timed, 1 otherwise, 2 for bad arguments, 130 when
    interrupted (finished cases are kept in the store).
    """
    from kernelkit.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, _progress, err, out
    from kernelkit.jobs.bench import bench_op
    from kernelkit.report.bench_table import bench_table
    from kernelkit.spec import parse_dtype, parse_size

    opened = None
    try:
        size_list = [parse_size(s) for s in sizes.split(",")] if sizes else []
        dtype_list = [parse_dtype(d) for d in dtypes.split(",")] if dtypes else []
        opened = None if no_store else _open_store(store)
        with _progress(False) as progress:
            task = progress.add_task("benchmarking", total=None)

            def advance(result: object) -> None:
                progress.update(task, advance=1, description=f"{result.impl} {'x'.join(map(str, result.size))} "
                                f"{result.dtype} {result.status.value}")

            report = bench_op(
                target, impls=impl or [], sizes=size_list, dtypes=dtype_list, device=device, mode=mode,
                budget=budget, rse_target=rse, baselines=baselines, graph_warm=graph_warm, timeout=timeout,
                store=opened,
                command=shlex.join(["kernelkit", *sys.argv[1:]]), on_result=advance,
            )
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    finally:
        if opened is not None:
            opened.close()
    out.print(bench_table([r for r in report.results if r.status is not Status.SKIPPED]))
    for line in _skips(report.results) + _warnings(report.results):
        out.print(line, highlight=False)
    _write_outputs(report, json_path, csv_path, plot_dir, err)
    if report.run_id is not None:
        err.print(f"stored as run {report.run_id} in {opened.path if opened else ''}; "
                  "see `kernelkit runs`, `kernelkit compare`", highlight=False)
    if report.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(0 if report.ok else EXIT_FAILED)


def _open_store(path: Path | None):  # noqa: ANN202 - store.Store, imported lazily
    from kernelkit.store import Store

    return Store.open(path)


def _skips(results: list) -> list[str]:
    """One line per skipped impl and reason (not a table row per size and dtype)."""
    reasons: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.status is Status.SKIPPED:
            cases = reasons.setdefault((r.impl, r.message), [])
            if r.dtype not in cases:
                cases.append(r.dtype)
    return [f"[dim]skipped[/] {impl} ({', '.join(dtypes)}): {escape(reason)}"
            for (impl, reason), dtypes in reasons.items()]


def _warnings(results: list) -> list[str]:
    """Failures, each measurement's warnings, then what the workers warned about (once each, with a count)."""
    from kernelkit.report.table import worker_warning_lines

    lines = [f"[red]{r.status.value}[/] {r.case_id}: {escape(r.message)}" for r in results if r.status.failed]
    for r in results:
        m = r.measurement
        for warning in (m.warnings if m else []):
            lines.append(f"[yellow]warning[/] {r.case_id}: {escape(warning)}")
    return lines + worker_warning_lines(results)


def _write_outputs(report: object, json_path: Path | None, csv_path: Path | None, plot_dir: Path | None,
                   err: object) -> None:
    from kernelkit.report import export

    if json_path is not None:
        err.print(f"wrote {export.write_json(report.results, json_path, env=report.env)}", highlight=False)
    if csv_path is not None:
        err.print(f"wrote {export.write_csv(report.results, csv_path)}", highlight=False)
    if plot_dir is not None:
        from kernelkit.report.plot import plot_results

        try:
            paths = plot_results(report.results, plot_dir)
        except KernelkitError as exc:
            err.print(f"[yellow]no plots:[/] {escape(str(exc))}", highlight=False)
        else:
            err.print(f"plots: {', '.join(str(p) for p in paths)}", highlight=False)


def calibrate_command(
    device: DeviceOpt = None,
    force: Annotated[bool, typer.Option(help="Measure again even when cached.")] = False,
) -> None:
    """Measure the device's ceilings once: copy bandwidth and dense matmul rates (cached per GPU, driver, torch)."""
    from kernelkit.cli import EXIT_USAGE, out
    from kernelkit.measure.device import calibrate
    from kernelkit.target import resolve_device

    try:
        ceilings = calibrate(resolve_device(device), force=force)
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    table = Table(title=f"ceilings of {ceilings.device_name}", title_justify="left")
    for name in ("ceiling", "value", "how"):
        table.add_column(name)
    table.add_row("copy bandwidth", f"{ceilings.copy_gbps:,.0f} GB/s", str(ceilings.notes.get("copy", "")))
    for kind, rate in ceilings.matmul_tflops.items():
        table.add_row(f"matmul {kind}", f"{rate:,.1f} TFLOP/s", str(ceilings.notes.get(kind, "")))
    out.print(table)


def runs_command(
    store: StoreOpt = None,
    limit: Annotated[int, typer.Option(help="How many runs, newest first.")] = 20,
) -> None:
    """List stored benchmark runs."""
    from kernelkit.cli import EXIT_USAGE, out

    try:
        with _open_store(store) as db:
            rows = db.runs(limit)
            path = db.path
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    table = Table(title=f"runs in {path}", title_justify="left")
    for name in ("run", "started", "status", "results", "passed", "device", "command"):
        table.add_column(name)
    for run in rows:
        table.add_row(str(run.id), run.started, run.status, str(run.n_results), str(run.n_passed),
                      run.device or "", escape(run.command))
    out.print(table)


def compare_command(
    run_a: Annotated[str, typer.Argument(help="The baseline run: an id, 'latest', or 'latest-1' for the one before.")],
    run_b: Annotated[str, typer.Argument(help="The run to compare with it.")],
    store: StoreOpt = None,
) -> None:
    """Per-case change from RUN_A to RUN_B; faster or slower only when the 95% interval excludes 1.0."""
    from kernelkit.cli import EXIT_USAGE, out
    from kernelkit.report.bench_table import format_time
    from kernelkit.store import compare

    try:
        with _open_store(store) as db:
            result = compare(db, _run_ref(run_a), _run_ref(run_b))
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    table = Table(title=f"run {result.run_a.id} -> run {result.run_b.id} (A/B > 1: B is faster)",
                  title_justify="left")
    for name in ("case", "mode", "A median", "B median", "A/B", "95% CI", "verdict", "note"):
        table.add_column(name)
    colors = {"faster": "green", "slower": "red", "same": "dim"}
    for row in result.changes:
        ratio = row.ratio
        table.add_row(
            row.case, row.mode,
            format_time(row.median_a) if row.median_a else "-", format_time(row.median_b) if row.median_b else "-",
            f"{ratio.value:.3f}" if ratio else "-", f"[{ratio.low:.3f}, {ratio.high:.3f}]" if ratio else "-",
            f"[{colors.get(row.verdict, 'white')}]{row.verdict}[/]" if row.verdict else "-", escape(row.note or ""),
        )
    out.print(table)
    for diff in result.env_diffs:
        out.print(f"[yellow]environment differs:[/] {escape(diff.key)}: {escape(str(diff.a))} -> "
                  f"{escape(str(diff.b))}", highlight=False)


def _run_ref(text: str) -> str | int:
    """'12' -> 12; 'latest' stays text; 'latest-1' -> -2 (the run before the latest; '-2' needs a '--' first)."""
    if text.startswith("latest-") and text[7:].isdigit():
        return -1 - int(text[7:])
    try:
        return int(text)
    except ValueError:
        return text
