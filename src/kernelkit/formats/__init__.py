"""Outside problem formats as kernelkit ops: KernelBench problems and levels, GPU MODE leaderboard tasks.

    import kernelkit as kk
    from kernelkit import formats

    ops = formats.load_ops("level1/19_ReLU.py", solution="my/19_ReLU.py")   # impls: reference, solution
    path = formats.source_file("reference-kernels/problems/pmpp_v2/vectoradd_py", "mine.py")
    kk.check(path)                       # a generated op file: checked in worker processes like any other

- sources.py: detect a path's format, load its ops, write the op file kernelkit's loader imports;
- kernelbench.py, gpumode.py: each format's loader (how it seeds, builds inputs and shares weights);
- verdicts.py: each format's own verdict, reproduced, and side by side with kernelkit's;
- summary.py: fast_p and geometric means; scan.py: load every problem of a KernelBench checkout, run nothing;
- export_problem, export_submission (runs/export.py): write a kernelkit impl as a KernelBench solution or a GPU MODE
  submission (and the op as a problem).
"""

from __future__ import annotations

import importlib
from typing import Any

from kernelkit.formats.sources import detect, load_ops, source_file
from kernelkit.formats.summary import LevelSummary, ProblemScore, fast_p, geometric_mean, level_summary
from kernelkit.formats.verdicts import (
    GpuModeVerdict,
    KernelBenchVerdict,
    SideBySide,
    gpumode_verdict,
    kernelbench_verdict,
    side_by_side,
)

__all__ = [
    "GpuModeVerdict",
    "KernelBenchVerdict",
    "LevelSummary",
    "ProblemScore",
    "SideBySide",
    "detect",
    "export_problem",
    "export_submission",
    "fast_p",
    "geometric_mean",
    "gpumode_verdict",
    "kernelbench_verdict",
    "level_summary",
    "load_ops",
    "side_by_side",
    "source_file",
]


def __getattr__(name: str) -> Any:
    """The exporters (runs/export.py), imported on first use: an export opens targets (kernelkit.target), which
    import this package for its loaders."""
    if name in ("export_problem", "export_submission"):
        return getattr(importlib.import_module("kernelkit.runs.export"), name)
    raise AttributeError(f"module 'kernelkit.formats' has no attribute {name!r}")
