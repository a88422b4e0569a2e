"""The kernelkit command line: a thin shell over the library (parse arguments, call, print).

One module per command group, each registering its commands: check.py (ops, check), bench.py (bench, calibrate,
runs, compare, report), profile.py (profile, ncu, asm, codegen), demo.py, doctor.py; common.py holds what they
share (options, exit codes, error exits). Every table they print is drawn in kernelkit.report.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape

from kernelkit import __version__
from kernelkit.cli import bench, check, demo, doctor, export, profile
from kernelkit.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, err, out
from kernelkit.cli.guard import unexpected
from kernelkit.errors import KernelkitError

app = typer.Typer(
    help="Write a GPU kernel, check it against a PyTorch reference, and see where its time goes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False) -> None:
    if version:
        out.print(f"kernelkit {__version__}")
        raise typer.Exit()


for group in (check, bench, profile, export, demo, doctor):
    group.register(app)


def main() -> None:
    """The entry point: no raw traceback for anything (see cli/guard.py)."""
    try:
        app(prog_name="kernelkit")
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except KernelkitError as exc:  # one raised outside a command's own handling (the cache, the store)
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001 - one line and the trace's file, never a raw traceback
        err.print(f"[bold red]error:[/] {escape(unexpected(exc))}", highlight=False)
        sys.exit(EXIT_ERROR)
