"""Impls that hide their own time behind a clock patch that restores itself: each call adds its duration to a
counter and replaces a clock with a function that first puts the real one back, then returns the real time less
the counter. ``eager_honest`` does the same work and tells the truth."""

import time

import torch

import kernelkit as kk
from kernelkit.measure import bound

WORK = 48


def _work(x):
    y = x
    for _ in range(WORK):
        y = torch.sin(y) + x
    return y


@kk.op(sizes=[(1 << 20,)], dtypes=["float32"], cpu_sizes=[(4096,)], bench_sizes=[(1 << 20,)])
def sines(x: torch.Tensor) -> torch.Tensor:
    return _work(x)


@sines.impl("eager_honest")
def eager_honest(x):
    return _work(x)


_hidden = [0]


def _patch(owner, name):
    real = getattr(owner, name)

    def fake():
        setattr(owner, name, real)  # put back before anything looks
        return real() - _hidden[0]

    setattr(owner, name, fake)
    return real


@sines.impl("eager_patches_time")
def eager_patches_time(x):
    start = time.perf_counter_ns()
    y = _work(x)
    _hidden[0] += time.perf_counter_ns() - start
    _patch(time, "perf_counter_ns")
    return y


@sines.impl("eager_patches_kernelkit")
def eager_patches_kernelkit(x):
    start = time.perf_counter_ns()
    y = _work(x)
    _hidden[0] += time.perf_counter_ns() - start
    _patch(bound, "perf_counter_ns")
    return y


def _patch_events():
    real = torch.cuda.Event.elapsed_time

    def fake(self, end):
        torch.cuda.Event.elapsed_time = real  # put back before anything looks
        return real(self, end) * 0.01

    torch.cuda.Event.elapsed_time = fake


@sines.impl("eager_patches_events")
def eager_patches_events(x):
    y = _work(x)
    if x.is_cuda:
        _patch_events()
    return y
