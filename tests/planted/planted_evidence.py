"""Impls for --determinism and --save-failing: one whose output carries a little fresh noise on every call (each
call within tolerance, no two calls alike in their bits), one that is simply right, and one that is wrong."""

import torch

import kernelkit as kk


@kk.op(sizes=[(16, 8)], cpu_sizes=[(16, 8)], dtypes=[torch.float32])
def evidence(x):
    return x * x


@evidence.impl("eager_noisy")
def noisy(x):
    y = x * x
    return y + torch.randn(y.shape, dtype=y.dtype, device=y.device) * 1e-6  # well inside fp32's 1e-5 floor


@evidence.impl("eager_exact")
def exact(x):
    return x * x


@evidence.impl("eager_wrong")
def wrong(x):
    return x * x + 1
