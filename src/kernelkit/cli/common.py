"""What every command shares: the consoles, exit codes, option types, error exits, the progress bar and parsers."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kernelkit.errors import KernelkitError

if TYPE_CHECKING:
    import torch

    from kernelkit.spec import Size
    from kernelkit.store import Store

# Piped output gets a wide page rather than rich's 80 columns, so tables stay one line per case.
out = Console(width=None if Console().is_terminal else 200)
err = Console(stderr=True)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_NOT_STORED = 3  # the results store failed mid-run: the results are in a recovery file, not the store
EXIT_ERROR = 4  # kernelkit or its environment failed (a message names it; the full trace is in a file)
DEFAULT_TIMEOUT = 60.0  # seconds per checked case: runner.DEFAULT_TIMEOUT, without importing the runner (torch)

TargetArg = Annotated[str, typer.Argument(help="A built-in op name (see `kernelkit ops`), a .py file of ops, a "
                                              "KernelBench problem file or folder of them, or a GPU MODE task folder.")]
SolutionOpt = Annotated[str | None, typer.Option(
    help="A KernelBench problem's solution (ModelNew) file, a folder of solutions for a folder of problems "
         "(matched by name), or a GPU MODE submission file; default: the reference (a task: its submission.py).")]
ImplOpt = Annotated[list[str] | None, typer.Option("--impl", "-i", help="Impl to run (repeatable); default: all.")]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu or cuda; default: cuda when a GPU is visible.")]
SizesOpt = Annotated[str | None, typer.Option(help="Comma-separated shapes, e.g. 64x48,1823x781; default: the op's.")]
DtypesOpt = Annotated[str | None, typer.Option(help="Comma-separated dtypes, e.g. float32,bf16; default: the op's.")]
SizeOpt = Annotated[str | None, typer.Option(help="One shape, e.g. 1823x781; default: the op's first.")]
DtypeOpt = Annotated[str | None, typer.Option(help="One dtype, e.g. float32 or bf16; default: the op's first.")]
OpOpt = Annotated[str | None, typer.Option("--op", help="The op, when the file defines several.")]
TimeoutOpt = Annotated[float, typer.Option(help="Seconds before a case is killed as TIMEOUT.")]
StoreOpt = Annotated[Path | None, typer.Option("--store", help="The results database; default: in the cache dir.")]
CompileModeOpt = Annotated[
    str | None,
    typer.Option(help="torch.compile mode of the `compile` baseline (default, max-autotune, ...); "
                      "default: $KERNELKIT_COMPILE_MODE or default."),
]
MaxMemoryOpt = Annotated[str | None, typer.Option(
    "--max-memory", help="Memory each worker may take on top of what it holds once started, e.g. 8G (CPU: an "
                         "address-space limit; GPU: the share of device memory torch may allocate).")]
ThreadsOpt = Annotated[int | None, typer.Option(
    "--threads", help="Torch threads of each CPU worker (default 1: on a shared or small machine more threads time "
                      "the contention, not the kernel); recorded with the run. No effect on a GPU's kernels.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show every warning the workers raised, library "
                                                                  "deprecations included (by default counted in one "
                                                                  "line).")]
RunArg = Annotated[str, typer.Argument(help="A run: an id, 'latest', or 'latest-1' for the one before.")]
GpusOpt = Annotated[str | None, typer.Option(
    "--gpus", help="Spread the run over this host's GPUs, one worker each: all, a count (2), or indices (0,1). "
                   "Each (op, size, dtype) stays on one GPU; each result records its GPU.")]
RayOpt = Annotated[str | None, typer.Option(
    "--ray", help="Run on a Ray cluster instead, one task with one GPU per (op, size, dtype): auto (the cluster "
                  "this host joined), local (start one here) or an address. Needs the ray extra.")]


def add_commands(app: typer.Typer, commands: dict[str, Callable[..., None]]) -> None:
    """Each of ``commands`` (name -> function) as a command of ``app``, in the order given (the order --help shows)."""
    for name, command in commands.items():
        app.command(name)(command)


def with_solution(target: str, solution: str | None) -> str:
    """The target that profile, ncu and asm open: with a ``solution``, the op file kernelkit generates for the
    problem and its solution (impl ``solution``), else ``target`` itself. Exits 2 naming what is wrong."""
    if solution is None:
        return target
    from kernelkit.errors import KernelkitError
    from kernelkit.target import resolve_problem

    try:
        source, _ = resolve_problem(target, solution)
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    return source


def fail(exc: BaseException, code: int) -> typer.Exit:
    """Print ``exc`` as an error line (no traceback) and return the Exit to raise with ``code``."""
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    return typer.Exit(code)


def nothing_ran(results: Sequence[Any], what: str = "ran") -> str:
    """'' unless every one of ``results`` (some) was SKIPPED; then the one line that says nothing ran, and why."""
    if not results or any(getattr(r, "status", None) is None or r.status.value != "SKIPPED" for r in results):
        return ""
    reasons = list(dict.fromkeys(r.message for r in results))
    more = f" (and {len(reasons) - 1} other reason{'s' if len(reasons) > 2 else ''}, listed above)" \
        if len(reasons) > 1 else ""
    return f"nothing {what}: all {len(results)} case(s) were skipped here: {reasons[0]}{more}"


def progress(quiet: bool = False) -> Progress:
    """A progress bar on stderr, shown only on a terminal."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True, disable=quiet or not err.is_terminal,
    )


def parse_sizes(text: str | None) -> list[Size]:
    """'64x48,1823x781' -> [(64, 48), (1823, 781)]; None -> [] (the op's own). An empty list is an error; a shape
    with no elements is kept, with a note."""
    if text is None:
        return []
    if not text.strip(" ,"):
        raise KernelkitError("--sizes is empty; give shapes such as 64x48,1823x781, or leave it out for the op's own")
    from kernelkit.spec import parse_size  # imports torch: only once a command parses sizes

    sizes = [parse_size(s) for s in text.split(",")]
    for size in sizes:
        if 0 in size:
            err.print(f"note: size {'x'.join(map(str, size))} has no elements: its cases only show that the impls "
                      "accept an empty input", highlight=False)
    return sizes


def parse_dtypes(text: str | None) -> list[torch.dtype]:
    """'float32,bf16' -> [torch.float32, torch.bfloat16]; None -> [] (the op's own)."""
    from kernelkit.spec import parse_dtype

    if text is None:
        return []
    if not text.strip(" ,"):
        raise KernelkitError("--dtypes is empty; give dtypes such as float32,bf16, or leave it out for the op's own")
    from kernelkit.errors import did_you_mean
    from kernelkit.spec import DTYPE_NAMES

    dtypes = []
    for name in text.split(","):
        try:
            dtypes.append(parse_dtype(name))
        except KernelkitError as exc:
            raise KernelkitError(f"{exc}{did_you_mean(name.strip().lower(), DTYPE_NAMES)}") from None
    return dtypes


def set_compile_mode(mode: str) -> None:
    """Check the mode, then hand it to the workers (spawned later, they inherit the environment)."""
    from kernelkit.backends import compiled

    try:
        os.environ[compiled.MODE_ENV] = compiled.resolve_mode(mode)
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None


def run_ref(text: str) -> str | int:
    """'12' -> 12; 'latest' stays text; 'latest-1' -> -2 (the run before the latest; '-2' needs a '--' first)."""
    if text.startswith("latest-") and text[7:].isdigit():
        return -1 - int(text[7:])
    try:
        return int(text)
    except ValueError:
        return text


def open_store(path: Path | None, create: bool = False) -> Store:
    """The results store at ``path`` (default: in the cache dir), opened; a missing ``path`` is an error unless
    ``create`` (only a command that records a run makes a store)."""
    from kernelkit.store import Store

    return Store.open(path, create=create)
