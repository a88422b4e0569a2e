"""Helpers shared by the op tests: what an impl can do on a machine without a GPU, inputs laid out at the edges
(non-contiguous, misaligned), and a compact view of a report for assertions."""

from __future__ import annotations

import math

import torch

import kernelkit as kk
from kernelkit.results import Status
from kernelkit.spec import seeded_normal

FP = (torch.float32, torch.float16, torch.bfloat16)
CPU_FP = (torch.float32, torch.float16)  # the Triton interpreter computes bfloat16 wrongly


def expected_on_cpu(backend: str, dtype: torch.dtype, numba_dtypes: tuple[torch.dtype, ...] = (torch.float32,)
                    ) -> Status:
    """What an impl of ``backend`` gives without a GPU: eager and compile run; Triton runs in its interpreter
    (not bfloat16); Numba in its simulator (``numba_dtypes``); CUDA C++ only compiles, then is SKIPPED."""
    if backend in ("eager", "compile"):
        return Status.PASSED
    if backend == "triton":
        return Status.SKIPPED if dtype == torch.bfloat16 else Status.PASSED
    if backend == "numba":
        return Status.PASSED if dtype in numba_dtypes else Status.SKIPPED
    return Status.SKIPPED


def summary(report: kk.RunReport) -> list[tuple[str, str, str, str, str, str]]:
    """(op, impl, size, dtype, status, message) per result: a failed assertion shows what went wrong where."""
    return [(r.op, r.impl, "x".join(map(str, r.size)), r.dtype, r.status.value, r.message) for r in report.results]


def non_contiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values with the dimensions laid out in reverse order in memory."""
    order = list(reversed(range(t.dim())))
    return t.permute(order).contiguous().permute(order)


def permuted(size: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, seed: int) -> torch.Tensor:
    """A seeded non-contiguous tensor of ``size``: drawn with its dimensions reversed, then permuted back."""
    x = seeded_normal(tuple(reversed(size)), dtype, device, seed)
    return x.permute(*reversed(range(x.dim())))


def misaligned(size: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, seed: int) -> torch.Tensor:
    """A seeded contiguous view one element into a fresh (256-byte aligned) buffer: off every 16-byte boundary."""
    return seeded_normal((math.prod(size) + 1,), dtype, device, seed)[1:].view(size)
