"""The kernelkit command line: a thin shell over the library (parse arguments, call, print)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelkit import __version__, cli_bench, cli_doctor, cli_profile, runner
from kernelkit.errors import CompileError, KernelkitError
from kernelkit.ops import BUILTIN_OPS
from kernelkit.report.table import print_report
from kernelkit.results import CaseResult
from kernelkit.spec import parse_dtype, parse_size
from kernelkit.target import open_target

app = typer.Typer(
    help="Write a GPU kernel, check it against a PyTorch reference, and see where its time goes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output gets a wide page rather than rich's 80 columns, so tables stay one line per case.
out = Console(width=None if Console().is_terminal else 200)
err = Console(stderr=True)

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130

ImplOpt = Annotated[list[str] | None, typer.Option("--impl", "-i", help="Impl to run (repeatable); default: all.")]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu or cuda; default: cuda when a GPU is visible.")]
SizesOpt = Annotated[str | None, typer.Option(help="Comma-separated shapes, e.g. 64x48,1823x781; default: the op's.")]
TimeoutOpt = Annotated[float, typer.Option(help="Seconds before a case is killed as TIMEOUT.")]
DtypesOpt = Annotated[str | None, typer.Option(help="Comma-separated dtypes, e.g. float32,bf16; default: the op's.")]
CompileModeOpt = Annotated[
    str | None,
    typer.Option(help="torch.compile mode of the `compile` baseline (default, max-autotune, ...); "
                      "default: $KERNELKIT_COMPILE_MODE or default."),
]


@app.callback(invoke_without_command=True)
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False) -> None:
    if version:
        out.print(f"kernelkit {__version__}")
        raise typer.Exit()


@app.command("ops")
def ops_command() -> None:
    """List the built-in ops and their impls."""
    table = Table(title="built-in ops", title_justify="left")
    for name in ("op", "impl", "backend", "dtypes", "what it is"):
        table.add_column(name)
    for name in BUILTIN_OPS:
        op = open_target(name).op()
        for impl in op.all_impls().values():  # the registered impls, then the `compile` baseline
            dtypes = ", ".join(str(d).removeprefix("torch.") for d in (impl.dtypes or op.dtypes))
            table.add_row(name, impl.name, impl.backend, dtypes, impl.description)
    out.print(table)


@app.command("check")
def check_command(
    target: Annotated[str, typer.Argument(help="A built-in op name (see `kernelkit ops`) or a .py file of ops.")],
    impl: ImplOpt = None,
    device: DeviceOpt = None,
    sizes: SizesOpt = None,
    dtypes: DtypesOpt = None,
    seeds: Annotated[int, typer.Option(help="Input seeds per case (fresh inputs each).")] = 1,
    timeout: TimeoutOpt = runner.DEFAULT_TIMEOUT,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable results to stdout.")] = False,
    strict: Annotated[bool, typer.Option(help="Count SKIPPED cases as failures for the exit code.")] = False,
    compile_mode: CompileModeOpt = None,
) -> None:
    """Check every case (impl x size x dtype x seed) against the op's reference, each in a worker process.

    Every op also has a `compile` impl (torch.compile of its reference), run when named: --impl compile.
    Exit code: 0 when every case that ran PASSED (with --strict: and none was SKIPPED), 1 otherwise,
    2 for bad arguments, 130 when interrupted.
    """
    if compile_mode is not None:
        _set_compile_mode(compile_mode)
    report = _run_check(target, impl or [], device, sizes, dtypes, seeds, timeout, quiet=as_json)
    if as_json:
        print(json.dumps(_report_json(report), indent=2))
    else:
        print_report(out, report.results, report.device, report.planned, report.interrupted)
    raise typer.Exit(_exit_code(report, strict))


@app.command("codegen")
def codegen_command(
    target: Annotated[str, typer.Argument(help="A built-in op name (see `kernelkit ops`) or a .py file of ops.")],
    size: Annotated[str | None, typer.Option(help="One shape, e.g. 1823x781; default: the op's first.")] = None,
    dtype: Annotated[str | None, typer.Option(help="One dtype, e.g. float32; default: the op's first.")] = None,
    device: DeviceOpt = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Folder for the code; default: ./kernelkit-codegen.")
    ] = None,
    op_name: Annotated[str | None, typer.Option("--op", help="The op, when the file defines several.")] = None,
    compile_mode: CompileModeOpt = None,
) -> None:
    """Print and save the code torch.compile (inductor) generates for the op's reference: C++ on CPU, Triton on GPU.

    The same code TORCH_LOGS=output_code shows, for one case (size x dtype). Saved as <op>_<size>_<dtype>.py.
    Exit code: 0 when saved, 1 when the compile failed, 2 for bad arguments.
    """
    from kernelkit.codegen import DEFAULT_OUT_DIR, codegen

    try:
        generated = codegen(target, size, dtype, device, mode=compile_mode, op_name=op_name)
        paths = generated.save(out_dir or DEFAULT_OUT_DIR)
    except CompileError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_FAILED) from None
    except KernelkitError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    print(generated.text)
    err.print(f"saved: {', '.join(str(p) for p in paths)}", highlight=False)


@app.command("demo")
def demo_command(
    device: DeviceOpt = None,
    quick: Annotated[bool, typer.Option(help="Fewer sizes and dtypes in the check and benchmark steps.")] = False,
    timeout: TimeoutOpt = runner.DEFAULT_TIMEOUT,
) -> None:
    """A guided tour of the loop on square and softmax: timing done wrong and right, check, bench, profile, asm, ncu.

    Each step says what it teaches, then shows the evidence; a step that breaks is reported and the tour goes on.
    Without a GPU: CPU timings, interpreter and simulator runs, CUDA C++ compiled only, ncu skipped.
    Exit code: 0 when every step that ran succeeded, 1 when one failed, 2 for bad arguments, 130 when interrupted.
    """
    from kernelkit.demo import run_demo

    try:
        code = run_demo(out, device, timeout, quick=quick)
    except KernelkitError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(code)


def _run_check(
    target: str, impls: list[str], device: str | None, sizes: str | None, dtypes: str | None,
    seeds: int, timeout: float, quiet: bool,
) -> runner.RunReport:
    try:
        size_list = [parse_size(s) for s in sizes.split(",")] if sizes else []
        dtype_list = [parse_dtype(d) for d in dtypes.split(",")] if dtypes else []
        with _progress(quiet) as progress:
            task = progress.add_task("checking", total=None)

            def advance(result: CaseResult) -> None:
                progress.update(task, advance=1, description=f"{result.impl} {result.status.value}")

            dev, cases = runner.plan(target, impls=impls, device=device, sizes=size_list, dtypes=dtype_list,
                                     seeds=seeds)
            progress.update(task, total=len(cases))
            return runner.run_cases(cases, dev, timeout=timeout, on_result=advance)
    except KernelkitError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None


def _set_compile_mode(mode: str) -> None:
    """Check the mode, then hand it to the workers (spawned later, they inherit the environment)."""
    from kernelkit.backends import compiled

    try:
        os.environ[compiled.MODE_ENV] = compiled.resolve_mode(mode)
    except KernelkitError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True, disable=quiet or not err.is_terminal,
    )


def _exit_code(report: runner.RunReport, strict: bool) -> int:
    if report.interrupted:
        return EXIT_INTERRUPTED
    bad = [r for r in report.results if r.status.failed or (strict and not r.status.ok)]
    return EXIT_FAILED if bad or not report.results else 0


def _report_json(report: runner.RunReport) -> dict[str, object]:
    import torch

    return {
        "device": report.device,
        "gpu": torch.cuda.get_device_name() if report.device == "cuda" else None,
        "planned": report.planned,
        "interrupted": report.interrupted,
        "torch": torch.__version__,
        "kernelkit": __version__,
        "results": [r.to_dict() for r in report.results],
    }


cli_profile.register(app)  # profile, ncu, asm
cli_bench.register(app)  # bench, calibrate, runs, compare
cli_doctor.register(app)  # doctor


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
