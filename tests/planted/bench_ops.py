"""Small ops for the benchmark engine's CPU tests: fast eager impls, one wrong, one that crashes while timed."""

from __future__ import annotations

import os

import torch

import kernelkit as kk


@kk.op(sizes=[(256, 256)], cpu_sizes=[(64, 64), (128, 128)], dtypes=[torch.float32],
       bytes=lambda x: 2 * x.numel() * x.element_size(), flops=lambda x: x.numel())
def double(x):
    return x * 2


@double.impl("eager_add")
def double_add(x):
    """x + x: the same values, another kernel."""
    return x + x


@double.impl("eager_wrong")
def double_wrong(x):
    """x * 3: fails the correctness gate, so it is never timed."""
    return x * 3


_calls = {"n": 0}


@double.impl("eager_flaky")
def double_flaky(x):
    """Right while checked, wrong once timing starts: the re-check of the last timed output catches it."""
    _calls["n"] += 1
    return x * 2 if _calls["n"] <= 4 else x * 2 + 1


@double.impl("eager_dies")
def double_dies(x):
    """Passes the check, then kills its process on the 10th call at 64 rows (while timed): that group CRASHES."""
    _calls["dies"] = _calls.get("dies", 0) + 1
    if _calls["dies"] >= 10 and x.shape[0] == 64:
        os._exit(3)
    return x * 2


@double.impl("eager_warns")
def double_warns(x):
    """Right, but warns on every call: the warning must reach the parent's result, not only the worker's log."""
    import warnings

    warnings.warn("eager_warns: this impl is deprecated", DeprecationWarning, stacklevel=1)
    return x * 2
