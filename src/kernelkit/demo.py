"""`kernelkit demo`: the guided tour, run on whatever this machine has."""

from __future__ import annotations

import torch
from rich.console import Console
from rich.markup import escape

from kernelkit import runner
from kernelkit.report.table import print_report


def run_demo(console: Console, device: str | None = None, timeout: float = runner.DEFAULT_TIMEOUT) -> int:
    """Check the built-in `square` op in every backend; returns the exit code (0 when nothing failed)."""
    dev = runner.resolve_device(device)
    gpu = torch.cuda.get_device_name() if dev == "cuda" else "none"
    console.rule("[bold]kernelkit demo")
    console.print(f"device: {dev} (GPU: {escape(gpu)}); torch {torch.__version__}", highlight=False)
    if dev == "cpu":
        console.print(
            "No GPU here: Triton runs in its interpreter, Numba in its CUDA simulator, and CUDA C++ kernels are "
            "compiled (to prove they build) but not run. CPU sizes are small; nothing here is a GPU timing.",
            highlight=False,
        )
    console.print("\n[bold]1. Check[/]: every impl of `square` against its reference, each case in a worker process.")
    report = runner.check("square", device=dev, timeout=timeout)
    print_report(console, report.results, report.device, report.planned, report.interrupted, title="square")
    if report.interrupted:
        return 130
    return 1 if any(r.status.failed for r in report.results) else 0
