"""Small ops for the spread tests (several workers side by side): fast eager impls, and one slow enough that a
worker can be killed while it runs."""

from __future__ import annotations

import time

import torch

import kernelkit as kk


@kk.op(sizes=[(64, 64)], cpu_sizes=[(8, 8), (16, 16), (24, 24), (32, 32)], dtypes=[torch.float32],
       bytes=lambda x: 2 * x.numel() * x.element_size())
def twice(x):
    return x * 2


@twice.impl("eager_add")
def twice_add(x):
    """x + x: the same values, another kernel."""
    return x + x


@twice.impl("eager_slow")
def twice_slow(x):
    """Right, but a tenth of a second per call: a case in flight for a kill to land on."""
    time.sleep(0.1)
    return x * 2
