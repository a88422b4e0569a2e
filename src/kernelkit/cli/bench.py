"""The measurement commands (bench, calibrate, runs, compare, report): parse arguments, call the library, print."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from kernelkit.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_STORED,
    EXIT_USAGE,
    DeviceOpt,
    GpusOpt,
    MaxMemoryOpt,
    RayOpt,
    RunArg,
    SolutionOpt,
    StoreOpt,
    TargetArg,
    ThreadsOpt,
    VerboseOpt,
    add_commands,
    err,
    fail,
    nothing_ran,
    open_store,
    out,
    parse_dtypes,
    parse_sizes,
    run_ref,
)
from kernelkit.cli.guard import check_output, check_seconds, set_max_memory, set_threads
from kernelkit.errors import KernelkitError, did_you_mean
from kernelkit.report.progress import run_bar
from kernelkit.results import Status


def register(app: typer.Typer) -> None:
    add_commands(app, {"bench": bench_command, "calibrate": calibrate_command, "runs": runs_command,
                       "compare": compare_command, "report": report_command})


def bench_command(
    target: TargetArg,
    impl: Annotated[list[str] | None, typer.Option("--impl", "-i", help="Impl to time (repeatable); default: all. "
                                                   "Name eager/compile to time only those baselines.")] = None,
    sizes: Annotated[str | None, typer.Option(help="Comma-separated shapes; default: the op's bench sizes.")] = None,
    dtypes: Annotated[str | None, typer.Option(help="Comma-separated dtypes; default: the op's.")] = None,
    mode: Annotated[str, typer.Option(help="cold (cache evicted per sample), hot (back-to-back calls), graph "
                                           "(CUDA-graph replay, cold) or kernel (the kernels' device time).")]
    = "cold",
    # A flag (an option with no value) added here goes into report.html_tables.BENCH_FLAGS too: the HTML report
    # reads stored command lines with it (tests/test_cli_bench.py checks the two agree).
    graph_warm: Annotated[bool, typer.Option("--graph-warm", help="Graph mode without rotating input copies: "
                                             "replays read warm L2 when the inputs fit.")] = False,
    device: DeviceOpt = None,
    budget: Annotated[float | None, typer.Option(help="Seconds of sampling per impl and case, at most; "
                                                  "default 10 on a GPU, 0.3 on the CPU.")] = None,
    rse: Annotated[float, typer.Option(help="Stop when the median's relative standard error is under this.")] = 0.005,
    baselines: Annotated[bool, typer.Option(help="Time eager PyTorch and torch.compile alongside.")] = True,
    compile_baseline: Annotated[bool, typer.Option("--compile/--no-compile", help="Time the torch.compile "
                                                   "baseline (its first build takes seconds a problem; eager "
                                                   "stays).")] = True,
    strict: Annotated[bool | None, typer.Option("--strict/--no-strict", help="Strict mode (README: Strict mode); "
                                                "default: on when the run is stored or written with --json/--csv "
                                                "(not with --gpus or --ray).")]
    = None,
    timeout: Annotated[float, typer.Option(help="Seconds before a correctness check is killed.")] = 60.0,
    gpus: GpusOpt = None,
    ray: RayOpt = None,
    store: StoreOpt = None,
    no_store: Annotated[bool, typer.Option("--no-store", help="Do not record the run.")] = False,
    calibrate: Annotated[bool, typer.Option("--calibrate/--no-calibrate", help="% of the device's calibrated "
                                            "ceilings (calibrated once per device, then cached); --no-calibrate "
                                            "leaves them out.")] = True,
    verbose: VerboseOpt = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write every result, raw samples too, to this "
                                                   "file (- : to stdout, instead of the table).")] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Write one CSV row per result.")] = None,
    plot_dir: Annotated[Path | None, typer.Option("--plot", help="Save PNG and SVG figures here: per op and dtype "
                                                  "the rate against size, the roofline and the peak memory (where "
                                                  "measured), and one roofline of every op.")] = None,
    solution: SolutionOpt = None,
    max_memory: MaxMemoryOpt = None,
    threads: ThreadsOpt = None,
    repeat: Annotated[int, typer.Option(help="Run the sweep N times and store each case's between-run spread "
                                             "(compare's noise floor); the last run is shown and stored.")] = 1,
    wide: Annotated[bool, typer.Option("--wide", help="Every column (n, spread, bound, notes, messages) in the "
                                                      "table; by default it fits 120 columns, notes below it.")]
    = False,
) -> None:
    """Time every impl of an op against eager PyTorch and torch.compile, after checking each against the reference.

    Each (size, dtype) runs in a worker process. Prints medians with their spread, GB/s and TFLOP/s from the
    op's cost model, % of the device's calibrated ceilings, and speedups with 95% bootstrap intervals.
    A folder of KernelBench problems also gets the level summary (fast_0, fast_1, fast_2, geometric-mean speedup
    of the solution over eager); a GPU MODE task, its ranking score (the geometric mean of the benchmark times).
    Exit code: 0 when every case that ran was correct and timed, 1 otherwise, 2 for bad arguments or when nothing
    could run here (every case SKIPPED), 130 when interrupted (finished cases are kept in the store).
    """
    from kernelkit.report.bench_table import bench_table, built_lines, note_lines, skip_lines, warning_lines
    from kernelkit.runs.repeat import bench_repeated

    opened = None
    try:
        _check_arguments(mode, device, budget, rse, timeout, store, no_store, json_path, csv_path, plot_dir)
        set_max_memory(max_memory)
        set_threads(threads)
        size_list, dtype_list = parse_sizes(sizes), parse_dtypes(dtypes)
        opened = None if no_store else open_store(store, create=True)
        with run_bar(err, "benchmarking") as bar:
            # Strict by default when the run may become a comparison's baseline (stored) or a submission (exported).
            # A run spread over GPUs or Ray is not strict unless asked (strict mode times on one worker).
            exported = (not no_store or json_path is not None or csv_path is not None) and not gpus and not ray
            report = bench_repeated(
                target, repeat, impls=impl or [], sizes=size_list, dtypes=dtype_list, device=device, mode=mode,
                budget=budget, rse_target=rse, graph_warm=graph_warm, timeout=timeout,
                baselines=baselines if compile_baseline or not baselines else ("eager",),
                gpus=gpus, ray=ray,
                store=opened, command=shlex.join(["kernelkit", *sys.argv[1:]]), on_result=bar.done,
                strict=exported if strict is None else strict, solution=solution, on_phase=bar.phase,
                on_plan=bar.planned, calibrate=calibrate,
            )
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    finally:
        if opened is not None:
            opened.close()
    idle = "" if report.interrupted or report.store_error else nothing_ran(report.results, "was timed")
    if idle:  # every case was skipped: a machine that cannot run them (a task's inputs made on a GPU, on a CPU)
        _write_outputs(report.results, report.env, json_path, csv_path, None)
        err.print(f"[bold red]error:[/] {escape(idle)}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE)
    shown = [r for r in report.results if r.status is not Status.SKIPPED]
    screen = err if json_path is not None and str(json_path) == "-" else out  # stdout holds the JSON alone
    screen.print(bench_table(shown, wide=wide))
    for line in [] if wide else note_lines(shown):
        screen.print(line, highlight=False)
    warned = warning_lines(report.results, notes_shown=not wide, verbose=verbose)
    for line in skip_lines(report.results) + built_lines(shown) + warned + _format_lines(target, report.results):
        screen.print(line, highlight=False)
    from kernelkit.report.bench_table import log_lines

    for line in log_lines(report.results):
        screen.print(line, highlight=False, soft_wrap=True)
    _write_outputs(report.results, report.env, json_path, csv_path, plot_dir)
    if report.store_error:
        kept = (f"every result of this run is in {report.recovery}" if report.recovery else
                "no recovery file could be written either: the table above and --json/--csv are what is left")
        err.print(f"[bold red]error:[/] results not stored: {escape(report.store_error)}\n{kept}; the stored run "
                  f"is marked incomplete", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_NOT_STORED)
    if report.run_id is not None:
        err.print(f"stored as run {report.run_id} in {opened.path if opened else ''}; "
                  "see `kernelkit runs`, `kernelkit compare`", highlight=False)
    if report.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(0 if report.ok else EXIT_FAILED)


def _format_lines(target: str, results: list) -> list[str]:
    """A KernelBench level's summary or a GPU MODE task's score, below the table; [] for other targets."""
    from kernelkit import formats
    from kernelkit.formats import kernelbench, summary
    from kernelkit.report.formats_view import gpumode_lines, level_lines

    kind = formats.detect(target)
    if kind == "kernelbench-level":
        impl = summary.solution_impl(results)
        problems = [p.stem for p in kernelbench.problem_files(target)]  # one without a solution counts too
        return level_lines(formats.level_summary(summary.scores_from_results(results, impl, problems)), impl)
    if kind == "gpumode":
        return gpumode_lines(summary.gpumode_scores(results))
    return []


def _check_arguments(mode: str, device: str | None, budget: float | None, rse: float, timeout: float,
                     store: Path | None, no_store: bool, json_path: Path | None, csv_path: Path | None,
                     plot_dir: Path | None) -> None:
    """Every flag that can be judged before any work: a bad one ends the command before a case runs."""
    from kernelkit.measure import modes
    from kernelkit.runs.check import check_timeout
    from kernelkit.target import resolve_device

    if mode not in modes.names():
        raise KernelkitError(f"unknown mode {mode!r}{did_you_mean(mode, modes.names())}; use one of "
                             f"{', '.join(modes.names())}")
    if modes.get(mode).needs_gpu and resolve_device(device) == "cpu":
        raise KernelkitError(f"--mode {mode} needs a CUDA GPU ({modes.get(mode).summary}); on the CPU use "
                             f"{' or '.join(modes.names('cpu'))}")
    check_seconds(budget, "--budget")
    check_timeout(timeout)
    if not (0 < rse < 1):
        raise KernelkitError(f"--rse must be between 0 and 1 (a fraction of the median), got {rse}")
    if no_store and store is not None:
        raise KernelkitError("--store and --no-store contradict each other; give one")
    check_output(json_path, "--json")
    check_output(csv_path, "--csv")
    check_output(plot_dir, "--plot", folder=True)


def _write_outputs(results: list, env: dict, json_path: Path | None, csv_path: Path | None,
                   plot_dir: Path | None) -> None:
    from kernelkit.measure.measurement import bench_document
    from kernelkit.report import export

    if json_path is not None and str(json_path) == "-":  # --json -: the document on stdout, instead of the table
        sys.stdout.write(bench_document(results, env=env))
    elif json_path is not None:
        err.print(f"wrote {export.write_json(results, json_path, env=env)}", highlight=False)
    if csv_path is not None:
        err.print(f"wrote {export.write_csv(results, csv_path)}", highlight=False)
    if plot_dir is not None:
        from kernelkit.report.plot import plot_results

        try:
            paths = plot_results(results, plot_dir)
        except KernelkitError as exc:
            err.print(f"[yellow]no plots:[/] {escape(str(exc))}", highlight=False)
        else:
            err.print(f"plots: {', '.join(str(p) for p in paths)}", highlight=False)


def calibrate_command(
    device: DeviceOpt = None,
    force: Annotated[bool, typer.Option(help="Measure again even when cached.")] = False,
) -> None:
    """Measure the device's ceilings once: copy bandwidth and dense matmul rates (cached per GPU, driver, torch)."""
    from kernelkit.measure.ceilings import NoisyCalibration, calibrate
    from kernelkit.report.bench_table import ceilings_table
    from kernelkit.target import resolve_device

    try:
        dev = resolve_device(device)
        with run_bar(err, "calibrating") as bar:  # a cached answer is instant; measuring takes ~15-25 s
            bar.phase(f"{dev}: copy bandwidth, then dense matmul rates per dtype (read from the cache when there)")
            ceilings = calibrate(dev, force=force)
    except NoisyCalibration as exc:
        raise fail(exc, EXIT_FAILED) from None
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    out.print(ceilings_table(ceilings))


def runs_command(
    store: StoreOpt = None,
    limit: Annotated[int, typer.Option(help="How many runs, newest first.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON to stdout.")] = False,
) -> None:
    """List stored benchmark runs."""
    import dataclasses

    from kernelkit.report.runs_table import runs_table

    try:
        with open_store(store) as db:
            rows = db.runs(limit)
            path = db.path
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    if as_json:
        print(json.dumps({"store": str(path), "runs": [dataclasses.asdict(r) for r in rows]}, indent=2, default=str))
        return
    out.print(runs_table(rows, path))


def compare_command(
    run_a: Annotated[str, typer.Argument(help="The baseline run: an id, 'latest', or 'latest-1' for the one before.")],
    run_b: Annotated[str, typer.Argument(help="The run to compare with it.")],
    store: StoreOpt = None,
    min_effect: Annotated[str | None, typer.Option(
        "--min-effect", help="Noise floor: smaller changes are 'same', e.g. 3%; default: the spread measured by "
                             "`bench --repeat`, else 2% on a GPU, 25% on the CPU, or 3x the wider run's IQR "
                             "when that is more.")] = None,
    fail_if_slower: Annotated[str | None, typer.Option(
        "--fail-if-slower", help="Regression gate: exit 1 when an impl's case is slower by more than this (e.g. "
                                 "3%) and beyond the 95% interval, broke, or is missing from RUN_B.")] = None,
    gate_baselines: Annotated[bool, typer.Option("--gate-baselines", help="The gate judges the eager and "
                                                 "torch.compile baselines too (by default only the impls).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON to stdout.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, and notes in the table.")] = False,
) -> None:
    """Per-case change from RUN_A to RUN_B: faster or slower only when the change exceeds both the 95% interval
    and the noise floor (the drift between runs of unchanged code).

    Exit code: 0, or 1 when --fail-if-slower finds a regression, 2 for bad arguments or runs that do not resolve.
    """
    from kernelkit.report.runs_table import comparison_json, print_comparison
    from kernelkit.store import compare, regressions

    try:
        floor = None if min_effect is None else parse_percent(min_effect, "--min-effect")
        gate = None if fail_if_slower is None else parse_percent(fail_if_slower, "--fail-if-slower")
        with open_store(store) as db:
            result = compare(db, run_ref(run_a), run_ref(run_b), min_effect=floor)
    except (KernelkitError, ValueError) as exc:
        raise fail(exc, EXIT_USAGE) from None
    slower = regressions(result, gate, gate_baselines) if gate is not None else []
    if as_json:
        print(json.dumps(comparison_json(result, gate, slower), indent=2, default=str))
    else:
        print_comparison(out, result, wide=wide)
        if gate is not None:
            verdict = (f"[bold red]regression:[/] {len(slower)} case{'s' if len(slower) != 1 else ''} slower by more "
                       f"than {gate:.1%} beyond the 95% interval, broken or lost: "
                       + ", ".join(escape(c.case) for c in slower) if slower
                       else f"[green]no regression[/] beyond {gate:.1%}")
            out.print(verdict, highlight=False)
    raise typer.Exit(EXIT_FAILED if slower else 0)


def parse_percent(text: str, option: str) -> float:
    """'3%' or '3' -> 0.03: a change as a fraction of the baseline's time."""
    try:
        value = float(text.strip().removesuffix("%")) / 100
    except ValueError:
        raise ValueError(f"{option} {text!r}: give a percentage, e.g. 3%") from None
    if not 0 <= value < 1:
        raise ValueError(f"{option} {text!r}: give a percentage from 0% to under 100%")
    return value


def report_command(
    run: RunArg = "latest",
    compare_with: Annotated[str | None, typer.Option("--compare", help="Diff against this run (A; RUN is B).")]
    = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the page.")] = Path("report.html"),
    store: StoreOpt = None,
) -> None:
    """Write one self-contained HTML page of a run: environment, results, plots, roofline, statuses, diff.

    Exit code: 0 when written, 2 for a run that does not resolve, a store that cannot be read or a page that
    cannot be written.
    """
    from kernelkit.report.html import write_report

    try:
        with open_store(store) as db:
            path = write_report(db, run_ref(run), run_ref(compare_with) if compare_with else None, output)
    except (KernelkitError, OSError) as exc:
        raise fail(exc, EXIT_USAGE) from None
    err.print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)", highlight=False, soft_wrap=True)
