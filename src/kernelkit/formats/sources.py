"""Which format a path is in, its ops, and a source file that kernelkit's loader (and its workers) can import.

``source_file(target, solution)`` writes a small generated Python file into kernelkit's cache that rebuilds the
ops when imported; its path works everywhere a user's op file does (``kk.check(path)``, ``kk.bench_op(path)``,
worker processes), because every process that imports it loads the problem again.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

import torch

from kernelkit import cache
from kernelkit.errors import LoadError
from kernelkit.formats import gpumode, kernelbench
from kernelkit.spec import Op, dtype_name, parse_dtype

if TYPE_CHECKING:
    from typing_extensions import Unpack

Format = Literal["kernelbench", "kernelbench-level", "gpumode"]


class LoadOptions(TypedDict, total=False):
    """How load_ops and source_file build a problem's ops, each optional: ``precision`` and ``tolerance``,
    KernelBench's (default float32 and its per-precision table); ``inputs_on``, where get_inputs() draws (default
    "device"; see kernelbench.problem_op)."""

    precision: torch.dtype | str
    tolerance: float | None
    inputs_on: kernelbench.InputsOn


def _options(precision: torch.dtype | str = torch.float32, tolerance: float | None = None,
             inputs_on: kernelbench.InputsOn = "device") -> tuple[torch.dtype, float | None, kernelbench.InputsOn]:
    """LoadOptions with their defaults, the precision as a dtype; an option it does not know is a TypeError."""
    return parse_dtype(precision) if isinstance(precision, str) else precision, tolerance, inputs_on


def detect(target: str | Path) -> Format | None:
    """'kernelbench' (a problem file), 'kernelbench-level' (a folder of them), 'gpumode' (a task folder), or None.

    Read from the files' text; nothing is imported.
    """
    path = Path(target).expanduser()
    if path.is_file() and path.suffix == ".py":
        return "kernelbench" if kernelbench.looks_like_problem(path) else None
    if gpumode.is_task(path):
        return "gpumode"
    if path.is_dir() and any(kernelbench.looks_like_problem(p) for p in kernelbench.problem_files(path)):
        return "kernelbench-level"
    return None


def load_ops(target: str | Path, solution: str | Path | None = None, **options: Unpack[LoadOptions]) -> list[Op]:
    """The ops of a KernelBench problem file (``solution``: its ModelNew file), a KernelBench level folder
    (``solution``: a folder of solutions, matched as kernelbench.find_solution says) or a GPU MODE task folder
    (``solution``: the submission file; default the task's submission.py); ``options``: precision, tolerance and
    inputs_on (see LoadOptions).
    """
    kind = detect(target)
    dtype, tolerance, inputs_on = _options(**options)
    if kind == "kernelbench":
        problem = kernelbench.load_problem(target)
        chosen = Path(solution) if solution is not None else None
        if chosen is not None and chosen.is_dir():
            chosen = kernelbench.find_solution(problem.path, chosen)
            if chosen is None:
                raise LoadError(f"no solution for {problem.path.name} in {solution} (see kernelbench.find_solution)")
        return [kernelbench.problem_op(problem, chosen, precision=dtype, tolerance=tolerance, inputs_on=inputs_on)]
    if kind == "kernelbench-level":
        return kernelbench.level_ops(target, solution, precision=dtype, tolerance=tolerance, inputs_on=inputs_on)
    if kind == "gpumode":
        return [gpumode.task_op(gpumode.load_task(target, solution))]
    raise LoadError(f"{target} is neither a KernelBench problem (a .py file defining Model, get_inputs and "
                    "get_init_inputs), a folder of them, nor a GPU MODE task folder (with task.yml)")


def ops_by_name(
    target: str, solution: str | None = None, precision: str = "float32", tolerance: float | None = None,
    inputs_on: kernelbench.InputsOn = "device",
) -> dict[str, Op]:
    """load_ops as {name: op}: what a generated source file puts in its module."""
    ops = load_ops(target, solution, precision=precision, tolerance=tolerance, inputs_on=inputs_on)
    return {op.name: op for op in ops}


def source_file(target: str | Path, solution: str | Path | None = None, **options: Unpack[LoadOptions]) -> str:
    """The path of a generated .py file defining the ops of ``target`` (see load_ops), for kernelkit's loader.

    The same arguments give the same file; it holds absolute paths only, so it works from any directory.
    """
    kind = detect(target)
    if kind is None:
        load_ops(target)  # raises the LoadError that says what a target must be
    dtype, tolerance, inputs_on = _options(**options)
    args = [str(Path(target).resolve()), str(Path(solution).resolve()) if solution is not None else None,
            dtype_name(dtype), tolerance, inputs_on]
    text = (
        f'"""The ops of {args[0]} ({kind}), generated by kernelkit for its loader; safe to delete."""\n\n'
        "from kernelkit.formats.sources import ops_by_name as _ops_by_name\n\n"
        f"globals().update(_ops_by_name({', '.join(map(repr, args))}))\n"
    )
    key = cache.content_key(text)[:16]
    stem = "".join(c if c.isalnum() else "_" for c in Path(target).resolve().name.removesuffix(".py"))
    path = cache.cache_dir("formats") / f"{stem}_{key}.py"
    if not path.exists():
        cache.write_atomic(path, text.encode())
    return str(path)
