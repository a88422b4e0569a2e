"""`kernelkit doctor` on the command line: parse arguments, call kernelkit.doctor, print."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from kernelkit.cli.common import EXIT_FAILED, EXIT_USAGE, DeviceOpt, fail, out
from kernelkit.errors import KernelkitError


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)


def doctor_command(
    device: DeviceOpt = None,
    ncu: Annotated[bool, typer.Option(help="Cross-check the timing modes with Nsight Compute when it is there.")]
    = True,
    budget: Annotated[float | None, typer.Option(help="Seconds of sampling per reference kernel and mode; "
                                                      "default 1 on a GPU, 0.5 on the CPU.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON to stdout.")] = False,
) -> None:
    """Check this machine before trusting its numbers: GPU, driver, clocks, persistence, ncu, ceilings, and every
    timing mode on two reference kernels, with a verdict per mode. Read-only: nothing is changed.

    Exit code: 0 when no check failed (warnings do not count), 1 when one did, 2 for bad arguments.
    """
    from kernelkit.doctor import doctor
    from kernelkit.report.doctor_table import print_doctor_report

    try:
        report = doctor(device, ncu=ncu, budget=budget)
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_doctor_report(out, report)
    raise typer.Exit(0 if report.ok else EXIT_FAILED)
