"""Planted cheats that need a GPU: work left on a side stream or a thread, and a cost model that claims too much.

``eager_honest`` is the op done right; ``inflated`` is an op whose cost model counts a thousand times the bytes
one call moves, so an honest impl of it times far above the calibrated ceiling (SUSPECT in strict mode).
"""

import threading
import time

import torch

import kernelkit as kk

SIZE = (4096, 4096)
SPIN_CYCLES = 5_000_000  # a few milliseconds of spinning on the GPU: still running when the call returns


@kk.op(sizes=[SIZE], cpu_sizes=[(64, 48)], dtypes=[torch.float32])
def gpu_cheat(x):
    """x squared."""
    return x * x


@gpu_cheat.impl("eager_honest")
def honest(x):
    return x * x


_side = []


@gpu_cheat.impl("eager_side_stream")
def side_stream(x):
    if not _side:
        _side.append(torch.cuda.Stream())
    stream = _side[0]
    y = torch.empty_like(x)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # the timer's events are on the current stream: they never wait for this
        torch.cuda._sleep(SPIN_CYCLES)
        torch.mul(x, x, out=y)
    return y


@gpu_cheat.impl("eager_gpu_thread")
def gpu_thread(x):
    y = torch.empty_like(x)

    def later():
        time.sleep(0.02)  # the call has returned (and its end event is recorded) before this work is launched
        torch.mul(x, x, out=y)

    threading.Thread(target=later, name="cheat-launcher", daemon=True).start()
    return y


@kk.op(sizes=[SIZE], cpu_sizes=[(64, 48)], dtypes=[torch.float32], bytes=lambda x: 1000 * 2 * x.numel() * 4)
def inflated(x):
    """x squared, with a cost model a thousand times too large."""
    return x * x


@inflated.impl("eager_honest")
def inflated_honest(x):
    return x * x
