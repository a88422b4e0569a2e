"""What a check leaves beside a case's status when asked: whether two calls on the same inputs give the same bits
(``--determinism``), and a failing case's tensors with the command that checks it again (``--save-failing DIR``).

Written once for both paths: the plain check (jobs/check.py, in the worker, which holds the tensors) and strict
mode (runs/strict.py, in the judging process, which holds the inputs and references and gets the outputs as bytes).
A saved case is ``DIR/<case>.pt``, ``torch.save`` of a dict of plain CPU tensors (``input.i``, ``expected.i``: the
reference in high precision, what the tolerance rule compares with, ``actual.i``), which ``torch.load(path,
weights_only=True)`` reads; and ``DIR/<case>.txt``, one line: the command that checks that case again.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelkit.errors import describe_exception
from kernelkit.results import CaseResult
from kernelkit.spec import Case

# Elements compared at a time: the byte views of one chunk stay small whatever the output's size.
CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class CheckOptions:
    """What a check does beyond each case's status. ``determinism``: each impl called a second time on the same
    inputs, its outputs compared bitwise (a difference is a note, not a failure); ``save_failing``: an absolute
    folder for each failing case's tensors; ``repro``: the command that checks the same target the same way
    (each saved case adds its impl, size, dtype, seed and device)."""

    determinism: bool = False
    save_failing: str = ""
    repro: str = ""


def differing_elements(a: Any, b: Any) -> int | None:
    """How many elements of tensors ``a`` and ``b`` differ in any bit (NaN payloads and -0.0 included); None when
    they are not two tensors of one shape and dtype."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or a.dtype != b.dtype:
        return None
    x = a.detach().reshape(-1)
    y = b.detach().to(a.device).reshape(-1)
    width = x.element_size()
    count = 0
    for start in range(0, x.numel(), CHUNK_ELEMENTS):
        bx = x[start:start + CHUNK_ELEMENTS].contiguous().view(torch.uint8).reshape(-1, width)
        by = y[start:start + CHUNK_ELEMENTS].contiguous().view(torch.uint8).reshape(-1, width)
        count += int((bx != by).any(dim=1).sum())
    return count


def determinism_note(first: Sequence[Any], second: Sequence[Any]) -> str:
    """'not deterministic: output 0 differs in 12 elements (of 4096) ...' for the outputs of two calls on the same
    inputs; '' when every bit agrees."""
    if len(first) != len(second):
        return f"not deterministic: {len(first)} outputs, then {len(second)}, from two calls on the same inputs"
    parts = []
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        n = differing_elements(a, b)
        if n is None and (isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b):
            parts.append(f"output {i} differs in shape, dtype or kind")
        elif n:
            parts.append(f"output {i} differs in {n} element{'s' if n > 1 else ''} (of {a.numel()})")
    if not parts:
        return ""
    return "not deterministic: " + "; ".join(parts) + ", between two calls on the same inputs (compared bitwise)"


def note_determinism(result: CaseResult, first: Sequence[Any], second: Sequence[Any]) -> None:
    """--determinism: ``details["determinism"]`` says whether two calls on the same inputs agree bitwise; where
    they differ the note is a warning too. The status stays the first call's."""
    note = determinism_note(first, second)
    result.details["determinism"] = note or "deterministic: two calls on the same inputs agree bitwise"
    if note:
        result.warnings.append(note)


def save_failing(result: CaseResult, options: CheckOptions, case: Case, device: str, inputs: Sequence[Any],
                 expected: Sequence[Any], actual: Sequence[Any] = ()) -> None:
    """--save-failing: the failing case saved (``save_case``), its path in ``details["saved"]``; nothing without
    a folder, and a folder that cannot be written is a warning, never the case's status."""
    if not options.save_failing:
        return
    try:
        result.details["saved"] = str(save_case(options, case, device, inputs, expected, actual))
    except Exception as exc:  # noqa: BLE001 - the case's own status stands
        result.warnings.append(f"--save-failing: the case could not be saved: {describe_exception(exc)}")


def repro_command(options: CheckOptions, case: Case, device: str) -> str:
    """The one line that checks ``case`` again: the run's command with the case's impl, size, dtype and seed."""
    base = options.repro or f"kernelkit check {shlex.quote(case.source)}"
    size = "x".join(map(str, case.size))
    return (f"{base} --impl {shlex.quote(case.impl)} --sizes {size} --dtypes {case.dtype} --seeds {case.seed + 1} "
            f"--device {device}")


def save_case(options: CheckOptions, case: Case, device: str, inputs: Sequence[Any], expected: Sequence[Any],
              actual: Sequence[Any] = ()) -> Path:
    """Write a failing case's inputs, expected and actual outputs to ``options.save_failing``/<case>.pt and the
    command that checks it again to <case>.txt beside it; the .pt's path."""
    folder = Path(options.save_failing)
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{case.op}-{case.impl}-{'x'.join(map(str, case.size))}-{case.dtype}-"
                                             f"seed{case.seed}")
    tensors: dict[str, torch.Tensor] = {}
    for name, values in (("input", inputs), ("expected", expected), ("actual", actual)):
        for i, value in enumerate(values):
            plain = _plain(value)
            if plain is not None:
                tensors[f"{name}.{i}"] = plain
    path = folder / f"{stem}.pt"
    torch.save(tensors, path)
    (folder / f"{stem}.txt").write_text(repro_command(options, case, device) + "\n")
    return path


def _plain(value: Any) -> torch.Tensor | None:
    """A plain CPU tensor of ``value`` (a tensor of any subclass, or a Python number); None for anything else."""
    if isinstance(value, torch.Tensor):
        return value.detach().as_subclass(torch.Tensor).to("cpu").clone()
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value)
    return None
