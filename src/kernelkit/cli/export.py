"""`kernelkit export`: write an impl as a KernelBench solution or a GPU MODE submission (and the op as a problem)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelkit.cli.common import EXIT_USAGE, DeviceOpt, DtypeOpt, OpOpt, TargetArg, err, fail, parse_sizes
from kernelkit.errors import KernelkitError, SpecError


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)


def export_command(
    target: TargetArg,
    impl: Annotated[str, typer.Option("--impl", "-i", help="The impl the submission runs.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="gpumode or kernelbench.")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="The submission file; default: "
                                                "<op>_<impl>_submission.py (gpumode), <op>_<impl>_solution.py "
                                                "(kernelbench).")] = None,
    problem: Annotated[Path | None, typer.Option(help="Also write the op as a problem here: a KernelBench problem "
                                                 "file, or a GPU MODE task folder.")] = None,
    sizes: Annotated[str | None, typer.Option(help="The problem's shapes (KernelBench: the first), e.g. 64x48,9x7; "
                                               "default: the op's GPU sizes, on any machine.")] = None,
    dtype: DtypeOpt = None,
    op: OpOpt = None,
    force: Annotated[bool, typer.Option(help="Overwrite files that exist.")] = False,
    device: DeviceOpt = None,
) -> None:
    """Write impl IMPL of an op as a submission in another format: a KernelBench solution (ModelNew) or a GPU MODE
    submission (custom_kernel). The file holds its own copy of the impl's code (Triton kernels and launchers, CUDA
    source through load_inline, helpers), so it runs without kernelkit, where the format's evaluator runs.

    Check it with the format's problem: `kernelkit check PROBLEM --solution FILE` (--problem writes one, standalone
    too, at the op's GPU sizes). Exit code: 0 when written, 2 for an unknown op, impl or format, an impl that needs
    kernelkit at run time (the message names the impls that export), or a file that exists (without --force).
    """
    from kernelkit import formats
    from kernelkit.runs.export import FORMATS
    from kernelkit.spec import parse_dtype
    from kernelkit.target import open_target

    try:
        if fmt not in FORMATS:
            raise SpecError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
        chosen = open_target(target, device).op(op)
        role = "submission" if fmt == "gpumode" else "solution"
        path = output if output is not None else Path(f"{chosen.name}_{impl}_{role}.py")
        for existing in (path, problem):
            if existing is not None and existing.exists() and not force:
                raise SpecError(f"{existing} exists; pass --force to overwrite it")
        kind = parse_dtype(dtype) if dtype is not None else None
        written = formats.export_submission(chosen, impl, fmt, path)  # type: ignore[arg-type]
        try:
            extra = None if problem is None else formats.export_problem(  # type: ignore[arg-type]
                chosen, fmt, problem, sizes=parse_sizes(sizes) or None, dtype=kind)
        except (KernelkitError, OSError):
            written.unlink()  # half a pair is not what was asked for
            raise
    except (KernelkitError, OSError) as exc:
        raise fail(exc, EXIT_USAGE) from None
    err.print(f"wrote {written} ({fmt} {role} running {chosen.name}/{impl}, without kernelkit)", highlight=False,
              soft_wrap=True)
    if extra is not None:
        err.print(f"wrote {extra} (the op as a {fmt} problem); check the pair: kernelkit check {extra} --solution "
                  f"{written}", highlight=False, soft_wrap=True)
