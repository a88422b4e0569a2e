"""NVTX ranges in user code: named spans that Nsight Systems (nsys) and Nsight Compute show on their timelines.

    import kernelkit as kk

    with kk.nvtx.range("attention"):        # a context manager ...
        ...

    @kk.nvtx.range("optimizer step")        # ... and the same object as a decorator
    def step(): ...

    @kk.nvtx.annotate()                     # the decorator spelling; the name defaults to the function's
    def forward(x): ...

``range(name)`` returns one ``NvtxRange``, usable both ways; ``annotate(name=None)`` is the decorator spelling.
Ranges nest. On CUDA they go through ``torch.cuda.nvtx``; without CUDA (no GPU, or a CPU build of torch, whose
NVTX functions raise) they do nothing, so the same code runs everywhere. Whether NVTX can be used is asked at the
first range entered, never at import.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


@functools.cache
def _backend() -> ModuleType | None:
    """torch.cuda.nvtx when a GPU is visible and this torch has NVTX built in, else None (ranges are no-ops)."""
    if not torch.cuda.is_available() or not hasattr(torch._C, "_nvtx"):
        return None
    from torch.cuda import nvtx

    return nvtx


class NvtxRange(contextlib.ContextDecorator):
    """A named NVTX range: pushed on entry, popped on exit, as a ``with`` block or around each call of a function.

    One instance may be entered many times and re-entered (recursion): it keeps no state between entry and exit.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> NvtxRange:
        nvtx = _backend()
        if nvtx is not None:
            nvtx.range_push(self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        nvtx = _backend()
        if nvtx is not None:
            nvtx.range_pop()

    def __repr__(self) -> str:
        return f"NvtxRange({self.name!r})"


def range(name: str) -> NvtxRange:  # noqa: A001 - reads as kk.nvtx.range, like torch.cuda.nvtx.range
    """A range named ``name``: ``with kk.nvtx.range("step"):`` or ``@kk.nvtx.range("step")``."""
    return NvtxRange(name)


def annotate(name: str | None = None) -> Callable[[F], F]:
    """Decorator: each call of the function is an NVTX range, named ``name`` or the function's qualified name."""

    def decorate(func: F) -> F:
        return NvtxRange(name or func.__qualname__)(func)

    return decorate
