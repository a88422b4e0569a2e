"""Planted cheats that need a GPU: work left on a side stream or a thread, a cost model that claims too much, and
inputs pinned in the L2.

``eager_honest`` is the op done right; ``inflated`` is an op whose cost model counts a thousand times the bytes
one call moves, so an honest impl of it times far above the calibrated ceiling (SUSPECT in strict mode).
``tiny_stream`` is 16x16: its side-stream cheats end within microseconds and join the timed stream before they
return, so nothing is late or wrong when the outputs are read; only where the work ran gives them away.
``resident``'s ``eager_persisting_window`` sets a persisting access-policy window over its input before each call,
so that the input would stay in the L2 through cold mode's eviction read if its persisting lines were not reset.
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


TINY = (16, 16)


@kk.op(sizes=[TINY], cpu_sizes=[TINY], dtypes=[torch.float32])
def tiny_stream(x):
    """x squared, at a size whose kernel ends within microseconds."""
    return x * x


@tiny_stream.impl("eager_honest")
def tiny_honest(x):
    return x * x


def _side_stream():
    if not _side:
        _side.append(torch.cuda.Stream())
    return _side[0]


@tiny_stream.impl("eager_side_stream_joined")
def tiny_side_stream_joined(x):
    stream = _side_stream()
    y = torch.empty_like(x)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # through torch.cuda.set_stream, in Python
        torch.mul(x, x, out=y)
    torch.cuda.current_stream().wait_stream(stream)  # joined: the output is complete once the timed stream is done
    return y


@tiny_stream.impl("eager_side_stream_entered")
def tiny_side_stream_entered(x):
    stream = _side_stream()
    y = torch.empty_like(x)
    stream.wait_stream(torch.cuda.current_stream())
    with stream:  # torch.Stream's own context manager: the switch is made in C++, no Python setter runs
        torch.mul(x, x, out=y)
    torch.cuda.current_stream().wait_stream(stream)
    return y


# 16 MiB of fp32: within an H100's persisting set-aside, and large enough that its HBM read is a fair share of a
# cold call (at 8 MiB, launch and sync took most of the 9 us and the pinned input won 6%, H200)
RESIDENT = (4096, 1024)


@kk.op(sizes=[RESIDENT], cpu_sizes=[(64, 48)], dtypes=[torch.float32])
def resident(x):
    """Row sums: reads the whole input, writes one value per row (the time is the input's read)."""
    return x.sum(dim=1)


@resident.impl("eager_honest")
def resident_honest(x):
    return x.sum(dim=1)


_SET_ASIDE: list[int] = []  # the bytes set aside, once set


def pin_in_l2(x):
    """Set aside the most persisting L2 the device allows and mark ``x`` persisting on the current stream."""
    from cuda.bindings import runtime as rt

    index = torch.cuda.current_device()
    err, most = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrMaxPersistingL2CacheSize, index)
    _checked(err, "reading the persisting L2 maximum")
    err, widest = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrMaxAccessPolicyWindowSize, index)
    _checked(err, "reading the widest access-policy window")
    if not _SET_ASIDE:  # once, as a cheat out to win would (set every call, it timed 46 us to the honest 9.8, H200)
        (err,) = rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, most)
        _checked(err, "setting the persisting L2 aside")
        _SET_ASIDE.append(most)
    value = rt.cudaStreamAttrValue()
    window = value.accessPolicyWindow
    window.base_ptr = x.data_ptr()
    window.num_bytes = min(x.numel() * x.element_size(), most, widest)
    window.hitRatio = 1.0
    window.hitProp = rt.cudaAccessProperty.cudaAccessPropertyPersisting
    window.missProp = rt.cudaAccessProperty.cudaAccessPropertyStreaming
    (err,) = rt.cudaStreamSetAttribute(torch.cuda.current_stream().cuda_stream,
                                       rt.cudaStreamAttrID.cudaLaunchAttributeAccessPolicyWindow, value)
    _checked(err, "setting the access-policy window")


def unpin_l2():
    """Give the set-aside back and clear the current stream's window (a test's cleanup)."""
    from cuda.bindings import runtime as rt

    value = rt.cudaStreamAttrValue()
    rt.cudaStreamSetAttribute(torch.cuda.current_stream().cuda_stream,
                              rt.cudaStreamAttrID.cudaLaunchAttributeAccessPolicyWindow, value)
    rt.cudaCtxResetPersistingL2Cache()
    rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, 0)
    _SET_ASIDE.clear()


def _checked(err, what):
    if int(err) != 0:
        raise RuntimeError(f"{what}: {err}")


@resident.impl("eager_persisting_window")
def persisting_window(x):
    pin_in_l2(x)
    return x.sum(dim=1)
