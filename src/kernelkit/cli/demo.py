"""`kernelkit demo`: the guided tour, on the command line."""

from __future__ import annotations

from typing import Annotated

import typer

from kernelkit.cli.common import DEFAULT_TIMEOUT, EXIT_USAGE, DeviceOpt, TimeoutOpt, fail, out
from kernelkit.errors import KernelkitError


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)


def demo_command(
    device: DeviceOpt = None,
    quick: Annotated[bool, typer.Option(help="Fewer sizes and dtypes in the check and benchmark steps.")] = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
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
        raise fail(exc, EXIT_USAGE) from None
    raise typer.Exit(code)
