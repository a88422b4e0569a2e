"""Planted cheats: one impl per way of gaming a judge, each of which strict mode must fail with its reason.

Unlike tests/planted (honest faults: wrong shapes, crashes, hangs), each impl here aims to pass a check or win
a benchmark without doing the work. ``eager_honest`` and ``triton_honest`` are the same op done right.
Impls that change the process for good (patching torch or kernelkit at import, changing a built-in op) live
in files of their own beside this one.
"""

import ctypes
import gc
import hashlib
import threading
import time

import torch
import triton
import triton.language as tl

import kernelkit as kk
from kernelkit.jobs.check import STALE_SEED_OFFSET

SIZE = (64, 48)


@kk.op(sizes=[SIZE], cpu_sizes=[SIZE], dtypes=[torch.float32])
def cheat(x):
    """The spec every cheat is judged against: x squared."""
    return x * x


@triton.jit
def cheat_square_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * x, mask=mask)


@triton.jit
def cheat_square_overrun_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    # The mask lets the last program store one block past the end.
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=1.0)
    tl.store(y_ptr + offsets, x * x, mask=offsets < n_elements + BLOCK_SIZE)


def _square_with(kernel, x, extra_blocks=0):
    y = torch.empty_like(x)
    n = x.numel()
    kernel[(triton.cdiv(n, 256) + extra_blocks,)](x, y, n, BLOCK_SIZE=256)
    return y


@cheat.impl("eager_honest")
def honest(x):
    return x * x


@cheat.impl("triton_honest", kernels=[cheat_square_kernel])
def triton_honest(x):
    return _square_with(cheat_square_kernel, x.contiguous())


@cheat.impl("eager_reads_freed_reference")
def reads_freed_reference(x):
    # The AI CUDA Engineer's hole: the reference ran just before, in this process; its freed output is often
    # the block torch.empty hands out next.
    return torch.empty_like(x)


_by_address = {}


@cheat.impl("eager_replay_by_address")
def replay_by_address(x):
    key = x.data_ptr()
    if key not in _by_address:
        _by_address[key] = x * x
    return _by_address[key]


_by_version = {}


@cheat.impl("eager_replay_by_version")
def replay_by_version(x):
    key = (x.data_ptr(), x._version)
    if key not in _by_version:
        _by_version[key] = x * x
    return _by_version[key]


_by_content = {}


@cheat.impl("eager_replay_by_content")
def replay_by_content(x):
    key = hashlib.sha1(x.detach().cpu().numpy().tobytes()).hexdigest()
    if key not in _by_content:
        _by_content[key] = x * x
    return _by_content[key]


@cheat.impl("eager_background_thread")
def background_thread(x):
    y = torch.empty_like(x)

    def later():
        time.sleep(0.05)  # returns first, so a timer that does not wait sees a free call
        torch.mul(x, x, out=y)

    threading.Thread(target=later, name="cheat-worker", daemon=True).start()
    return y


class _Lazy(torch.Tensor):
    """Looks like the answer when compared; holds nothing computed when returned."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


@cheat.impl("eager_lazy_subclass")
def lazy_subclass(x):
    return torch.Tensor._make_subclass(_Lazy, x * x)


@cheat.impl("eager_patches_torch_equal")
def patches_torch_equal(x):
    torch.equal = lambda a, b: True  # an input written in place would then look untouched
    return x.mul_(x)


@cheat.impl("eager_patches_timer")
def patches_timer(x):
    clock = time.perf_counter
    time.perf_counter = lambda: clock() / 1000  # every timed interval a thousand times shorter
    return x * x


@cheat.impl("eager_patches_verdict")
def patches_verdict(x):
    from kernelkit import verify
    from kernelkit.jobs import check
    from kernelkit.results import Status

    check.judge = lambda *a, **k: verify.Verdict(Status.PASSED)
    return torch.zeros_like(x)


@cheat.impl("eager_expected_from_gc")
def expected_from_gc(x):
    for obj in gc.get_objects():  # the float64 reference, if it lives in this process
        if type(obj) is torch.Tensor and obj.dtype == torch.float64 and obj.shape == x.shape:
            return obj.to(x.dtype)
    return torch.empty_like(x)


def _predicted():
    answers = {}
    for seed in (0, STALE_SEED_OFFSET):
        (x,) = cheat.make_inputs(SIZE, torch.float32, torch.device("cpu"), seed)
        answers[float(x[0, 0])] = x * x
    return answers


_answers = {}


@cheat.impl("eager_predicted_seed")
def predicted_seed(x):
    # Knows the seeds a check uses: looks the answer up instead of computing it.
    if not _answers:
        _answers.update(_predicted())
    found = _answers.get(float(x[0, 0]))
    return found.to(x.device).clone() if found is not None else torch.zeros_like(x)


@cheat.impl("triton_falls_back", kernels=[cheat_square_kernel])
def falls_back(x):
    try:
        y = torch.empty_like(x)
        cheat_square_kernel[(1,)](x, y)  # a launch that fails (arguments missing)
        return y
    except Exception:  # noqa: BLE001 - the cheat: answer with the reference instead
        return cheat.reference(x)


@cheat.impl("eager_hard_coded_shape")
def hard_coded_shape(x):
    # Correct for the listed size only: the work is laid out for 64x48 elements.
    y = torch.empty_like(x).view(-1)
    n = SIZE[0] * SIZE[1]
    y[:n] = x.reshape(-1)[:n] * x.reshape(-1)[:n]
    return y.view(x.shape)


@cheat.impl("eager_one_tuple")
def one_tuple(x):
    return (x * x,)


@cheat.impl("triton_writes_past_end", kernels=[cheat_square_overrun_kernel])
def writes_past_end(x):
    return _square_with(cheat_square_overrun_kernel, x.contiguous(), extra_blocks=1)


@cheat.impl("eager_writes_past_end_raw")
def writes_past_end_raw(x):
    y = x * x
    out = torch.empty_like(x)
    out.copy_(y)
    ctypes.memset(out.data_ptr() + out.numel() * out.element_size(), 0, 1024)  # 1 KiB past the end
    return out


def _call_counter(k):
    # Counts calls and computes only the first k of a series (a new shape, dtype or device starts one), then answers
    # call n with a copy of what it computed for call n mod k: right whenever the harness cycles over k input sets in
    # order. Copies, so no output storage is ever returned twice.
    series = {"key": None, "n": 0, "answers": []}

    def impl(x):
        key = (x.shape, x.dtype, x.device)
        if key != series["key"]:
            series.update(key=key, n=0, answers=[])
        n = series["n"]
        series["n"] = n + 1
        if n < k:
            series["answers"].append(x * x)
        return series["answers"][n % k].clone()

    return impl


cheat.impl("eager_call_counter_3")(_call_counter(3))
cheat.impl("eager_call_counter_8")(_call_counter(8))
