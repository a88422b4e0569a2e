"""A file that patches the harness when it is imported: every comparison would then agree."""

import torch

import kernelkit as kk

torch.allclose = lambda *args, **kwargs: True  # the cheat, done before any case runs


@kk.op(sizes=[(8, 8)], cpu_sizes=[(8, 8)])
def doubled(x):
    return 2 * x


@doubled.impl("eager_zeros")
def doubled_zeros(x):
    return torch.zeros_like(x)
