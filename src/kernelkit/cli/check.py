"""`kernelkit ops` and `kernelkit check`: list the built-in ops; check every case against its reference."""

from __future__ import annotations

import contextlib
import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from kernelkit.cli.common import (
    DEFAULT_TIMEOUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CompileModeOpt,
    DeviceOpt,
    DtypesOpt,
    GpusOpt,
    ImplOpt,
    MaxMemoryOpt,
    RayOpt,
    SizesOpt,
    SolutionOpt,
    TargetArg,
    ThreadsOpt,
    TimeoutOpt,
    VerboseOpt,
    add_commands,
    err,
    fail,
    nothing_ran,
    out,
    parse_dtypes,
    parse_sizes,
    progress,
    set_compile_mode,
)
from kernelkit.cli.guard import json_stdout, set_max_memory, set_threads
from kernelkit.errors import KernelkitError
from kernelkit.jobs.sanitize import SANITIZERS
from kernelkit.report.progress import run_bar

if TYPE_CHECKING:
    from kernelkit.results import RunReport


Sanitizer = enum.Enum("Sanitizer", {name: name for name in SANITIZERS}, type=str)  # --sanitize TOOL's choices


def register(app: typer.Typer) -> None:
    add_commands(app, {"ops": ops_command, "check": check_command})


def ops_command(
    name: Annotated[str | None, typer.Argument(help="One op: its sizes, dtypes and every impl.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ops as JSON to stdout.")] = False,
) -> None:
    """List the built-in ops and their impls (NAME: one op in full)."""
    from kernelkit.cli.catalog import catalog
    from kernelkit.errors import did_you_mean
    from kernelkit.report.check_table import SHORT_DTYPES

    ops = catalog()
    if name is not None:
        ops = [op for op in ops if op["name"] == name]
        if not ops:
            raise fail(KernelkitError(f"no built-in op {name!r}{did_you_mean(name, [o['name'] for o in catalog()])}"
                                      "; `kernelkit ops` lists them"), EXIT_USAGE)
    if as_json:
        print(json.dumps(ops, indent=2))
        return
    short = lambda dtypes: ", ".join(SHORT_DTYPES.get(d, d) for d in dtypes)
    table = Table(title="built-in ops" if name is None else f"{name}: {ops[0]['description']}", title_justify="left")
    for column in ("op", "impl", "backend", "dtypes", "what it is"):
        table.add_column(column, overflow="fold", max_width=30 if column == "what it is" else None)  # 120 columns
    for op in ops:
        for impl in op["impls"]:  # the registered impls, then the `compile` baseline
            table.add_row(op["name"], impl["name"], impl["backend"], short(impl["dtypes"]), impl["description"])
    out.print(table)
    if name is not None:
        sizes = lambda sizes: ", ".join("x".join(map(str, s)) for s in sizes)
        out.print(f"sizes (check on a GPU): {sizes(ops[0]['sizes'])}\nbench sizes (GPU): {sizes(ops[0]['bench_sizes'])}"
                  f"\nCPU sizes: {sizes(ops[0]['cpu_sizes'])}\ndtypes: {short(ops[0]['dtypes'])}", highlight=False)


def check_command(
    target: TargetArg,
    impl: ImplOpt = None,
    device: DeviceOpt = None,
    sizes: SizesOpt = None,
    dtypes: DtypesOpt = None,
    seeds: Annotated[int, typer.Option(help="Input seeds per case (fresh inputs each).")] = 1,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable results to stdout.")] = False,
    strict: Annotated[bool | None, typer.Option(
        "--strict/--no-strict", show_default="strict where it can run",
        help="Strict mode (README: Strict mode), the default: references judged here, the impl watched in its "
             "worker. --no-strict: the fast path. --strict: refuse a run strict mode cannot judge (--gpus/--ray), "
             "and count SKIPPED cases as failures.")] = None,
    determinism: Annotated[bool, typer.Option(
        "--determinism", help="Call each impl twice on the same inputs and compare the outputs bitwise: a note "
                              "where they differ (the status stays).")] = False,
    save_failing: Annotated[Path | None, typer.Option(
        "--save-failing", metavar="DIR", help="For each failing case, DIR/<case>.pt (its inputs, expected and actual "
                                              "outputs: torch.save of plain tensors) and DIR/<case>.txt (the command "
                                              "that checks it again).")] = None,
    sanitize: Annotated[Sanitizer | None, typer.Option(
        metavar="TOOL",
        help="Run the check again under compute-sanitizer (GPU): memcheck (every out-of-bounds or misaligned "
             "access), racecheck (shared-memory races), initcheck (reads of uninitialized global memory) or "
             "synccheck (invalid barrier use).")] = None,
    compile_mode: CompileModeOpt = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every column (backend, notes) in the table; by default it "
                                                      "fits 120 columns, notes below it.")] = False,
    gpus: GpusOpt = None,
    ray: RayOpt = None,
    solution: SolutionOpt = None,
    verdicts: Annotated[bool, typer.Option(help="With a KernelBench problem or a GPU MODE task: reach the format's "
                                                "own verdict too, beside kernelkit's.")] = True,
    max_memory: MaxMemoryOpt = None,
    threads: ThreadsOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Check every case (impl x size x dtype x seed) against the op's reference, each in a worker process.

    Every op also has a `compile` impl (torch.compile of its reference), run when named: --impl compile.
    A KernelBench problem (with --solution: its ModelNew file), a folder of them (--solution: a folder, matched by
    file name) or a GPU MODE task folder (--solution: a submission file) also gets the format's own verdict,
    beside kernelkit's status and why they differ. The exit code follows kernelkit's statuses.
    Strict by default (one line says which path ran). Exit code: 0 when every case that ran PASSED (with
    --strict: and none was SKIPPED), 1 otherwise, 2 for bad arguments or when nothing could run here (every case
    SKIPPED), 130 when interrupted.
    """
    from kernelkit import __version__

    if sanitize:
        raise typer.Exit(_sanitized(sanitize.value))
    from kernelkit.report.check_table import check_json, print_report
    from kernelkit.report.formats_view import verdict_json, verdict_lines

    if compile_mode is not None:
        set_compile_mode(compile_mode)
    try:
        set_max_memory(max_memory)
        set_threads(threads)
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    pure = contextlib.ExitStack()  # with --json, stdout holds the document alone: prints go to stderr meanwhile
    pure.enter_context(json_stdout(as_json))
    report = _run_check(target, impl or [], device, sizes, dtypes, seeds, timeout, quiet=as_json, strict=strict,
                        gpus=gpus, ray=ray, solution=solution, determinism=determinism, save_failing=save_failing)
    idle = "" if report.interrupted else nothing_ran(report.results)
    rows, stopped = [], False
    if verdicts and not report.interrupted and not idle:
        try:
            rows = _verdicts(target, solution, impl or [], report, timeout)
        except KeyboardInterrupt:  # Ctrl-C while the format's own verdicts run: kernelkit's results stand
            stopped = True
    pure.close()
    if as_json:
        data = check_json(report, __version__)
        if rows:
            data["verdicts"] = [verdict_json(row) for row in rows]
        print(json.dumps(data, indent=2))
    elif not idle:
        out.print(report.path, highlight=False)
        print_report(out, report.results, report.device, report.planned, report.interrupted, wide=wide,
                     verbose=verbose)
        for line in verdict_lines(rows):
            out.print(line, highlight=False)
        if save_failing is not None:
            out.print(_saved_line(report, save_failing), highlight=False)
    if stopped:
        err.print("interrupted while reaching the format's own verdicts: kernelkit's results above are complete, "
                  "the format's verdicts were not reached", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED)
    if idle:  # every case was skipped: a machine that cannot run them (a task's inputs made on a GPU, on a CPU)
        err.print(f"[bold red]error:[/] {escape(idle)}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE)
    raise typer.Exit(_exit_code(report, strict is True))


def _verdicts(target: str, solution: str | None, impls: list[str], report: RunReport, timeout: float) -> list:
    """The format's own verdict on each problem of an outside problem target, beside kernelkit's; [] otherwise."""
    from kernelkit.formats.jobs import verdict_jobs
    from kernelkit.runs.verdicts import run_verdicts

    planned = [p for p in verdict_jobs(target, solution) if not impls or p.impl in impls]
    if not planned:
        return []
    with progress() as bar:
        bar.add_task(f"the format's own verdict on {len(planned)} problem(s)", total=None)
        return run_verdicts(planned, report.results, report.device, timeout=timeout)


def _run_check(
    target: str, impls: list[str], device: str | None, sizes: str | None, dtypes: str | None,
    seeds: int, timeout: float, quiet: bool, strict: bool | None = None,
    gpus: str | None = None, ray: str | None = None, solution: str | None = None,
    determinism: bool = False, save_failing: Path | None = None,
) -> RunReport:
    from kernelkit.runs.check import check

    try:
        size_list, dtype_list = parse_sizes(sizes), parse_dtypes(dtypes)
        with run_bar(err, "checking", quiet) as bar:
            return check(target, impls=impls, device=device, sizes=size_list, dtypes=dtype_list, seeds=seeds,
                         timeout=timeout, on_result=bar.done, gpus=gpus, ray=ray, solution=solution, strict=strict,
                         on_phase=bar.phase, on_plan=bar.planned, determinism=determinism,
                         save_failing=save_failing)
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None


def _saved_line(report: RunReport, folder: Path) -> str:
    saved = [r.details["saved"] for r in report.results if r.details.get("saved")]
    if not saved:
        return f"--save-failing: no failing case to save in {folder}"
    return (f"--save-failing: {len(saved)} failing case(s) saved in {folder}: <case>.pt (input.i, expected.i, "
            "actual.i: plain tensors for torch.load(path, weights_only=True)) and <case>.txt (the command that checks "
            "it again)")


def _sanitized(tool: str) -> int:
    """The check again under compute-sanitizer's ``tool`` (its arguments are this command's); EXIT_FAILED when it
    found errors."""
    import sys

    from kernelkit.jobs import sanitize

    args = sys.argv[sys.argv.index("check") + 1:] if "check" in sys.argv else sys.argv[1:]
    try:
        done = sanitize.run(args, tool=tool)
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    out.print(done.output[-6000:], highlight=False, markup=False)
    calls = ""
    if done.api_calls:
        kinds = sorted(set(done.api_calls), key=done.api_calls.index)
        calls = (f"{len(done.api_calls)} CUDA API call(s) returned an error ({'; '.join(kinds[:3])}"
                 f"{'; ...' if len(kinds) > 3 else ''})")
    if done.kernel_errors or (done.returncode == sanitize.ERROR_EXIT and not done.api_calls):
        out.print(f"compute-sanitizer {tool}: {done.kernel_errors} error(s)" + (f"; and {calls}" if calls else ""),
                  highlight=False)
        return EXIT_FAILED
    if calls and done.returncode in (0, sanitize.ERROR_EXIT):
        out.print(f"compute-sanitizer {tool}: no errors in the kernels; {calls}: errors a library handled (a "
                  "probe), or the impl's own host code (each call is listed above)", highlight=False)
        return 0
    if done.returncode:  # no sanitizer error: the check under it failed on its own (its exit code, its reason above)
        out.print(f"compute-sanitizer {tool}: no errors found, but the check under it exited {done.returncode} "
                  "(its own message is above)", highlight=False)
        return done.returncode if 0 < done.returncode < 128 else EXIT_FAILED
    out.print(f"compute-sanitizer {tool}: no errors", highlight=False)
    return 0


def _exit_code(report: RunReport, strict: bool) -> int:
    if report.interrupted:
        return EXIT_INTERRUPTED
    bad = [r for r in report.results if r.status.failed or (strict and not r.status.ok)]
    return EXIT_FAILED if bad or not report.results else 0
