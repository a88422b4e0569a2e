"""Contenders that pass their check, then crash or hang while they are timed (after a few calls in the process)."""

import os
import time

import torch

import kernelkit as kk

_calls: dict[str, int] = {}


@kk.op(sizes=[(8, 8)], cpu_sizes=[(8, 8)], bench_sizes=[(8, 8)], dtypes=[torch.float32])
def timed(x):
    return x * x


def _nth(name: str) -> int:
    """How many times ``name`` was called in this process (a check calls it twice; timing, many times)."""
    _calls[name] = _calls.get(name, 0) + 1
    return _calls[name]


@timed.impl("eager_good")
def good(x):
    return x * x


@timed.impl("eager_crashes_when_timed")
def crashes_when_timed(x):
    if _nth("crash") > 3 and os.environ.get("KK_BENCH_HOSTILE", "crash") in ("crash", "both"):
        os.abort()
    return x * x


@timed.impl("eager_hangs_when_timed")
def hangs_when_timed(x):
    if _nth("hang") > 3 and os.environ.get("KK_BENCH_HOSTILE") in ("hang", "both"):
        time.sleep(600)
    return x * x
