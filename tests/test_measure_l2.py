"""Persisting L2 lines reset before each cold sample (measure/l2.py): a silent no-op without a GPU, the runtime's
calls in the right order where there is one, and on a GPU a call that pins its input in the L2 timed no faster
than an honest one."""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import pytest
import torch

from kernelkit.measure import l2, samplers

CHEATS = Path(__file__).parent / "cheats"


class FakeRuntime:
    """Records the calls a reset makes; ``limit``/``window`` say what it finds."""

    source = "fake"

    def __init__(self, limit: int = 0, window: int = 0, refuse: bool = False) -> None:
        self._limit, self._window, self.refuse = limit, window, refuse
        self.calls: list[tuple] = []

    def limit(self) -> int:
        self.calls.append(("limit",))
        return self._limit

    def window_bytes(self, stream: int) -> int:
        self.calls.append(("window_bytes", stream))
        return self._window

    def set_window(self, stream, base, nbytes, hit_ratio, hit, miss) -> int:
        self.calls.append(("set_window", stream, base, nbytes, hit_ratio, hit, miss))
        return 1 if self.refuse else 0

    def reset_lines(self) -> int:
        self.calls.append(("reset_lines",))
        return 1 if self.refuse else 0


def test_without_a_gpu_a_reset_does_nothing_and_says_nothing():
    for device in ("cpu", "cuda"):  # no GPU is visible here: "cuda" is as silent as the CPU
        if device == "cuda" and torch.cuda.is_available():
            continue
        persisting = l2.PersistingL2.open(device)
        assert persisting.runtime is None and persisting.missing == ""
        persisting.reset(0)
        assert persisting.notes() == []


def test_the_cpu_reset_is_a_no_op_in_time_too():
    persisting = l2.PersistingL2.open("cpu")
    calls = 20_000
    start = time.perf_counter()
    for _ in range(calls):
        persisting.reset(0)
    per_call = (time.perf_counter() - start) / calls
    assert per_call < 2e-6, f"{per_call * 1e9:.0f} ns per reset on the CPU"  # ~40 ns measured on a 2-core VM


def test_a_reset_with_nothing_pinned_resets_the_lines_without_waiting():
    runtime = FakeRuntime()
    waits = []
    persisting = l2.PersistingL2(runtime, sync=lambda: waits.append(1))
    persisting.reset(0x7F)
    assert waits == []
    assert ("reset_lines",) in runtime.calls
    assert not any(call[0] == "set_window" for call in runtime.calls)
    assert persisting.notes() == []


@pytest.mark.parametrize(("limit", "window"), [(4 << 20, 0), (0, 8 << 20), (4 << 20, 8 << 20)])
def test_a_set_aside_or_a_window_makes_the_sample_wait_then_both_are_undone(limit, window):
    runtime = FakeRuntime(limit=limit, window=window)
    order = []
    persisting = l2.PersistingL2(runtime, sync=lambda: order.append("sync"))
    persisting.reset(0x7F)
    order.extend(call[0] for call in runtime.calls if call[0] in ("set_window", "reset_lines"))
    assert order[0] == "sync" and order[-1] == "reset_lines"  # lines queued work may pin are pinned before the reset
    if window:
        assert ("set_window", 0x7F, 0, 0, 0.0, l2.NORMAL, l2.NORMAL) in runtime.calls  # an empty window, hit ratio 0
    assert persisting.waited == 1
    said = " ".join(persisting.notes())
    assert "waited for the device" in said
    assert (f"a persisting L2 set-aside of {limit} bytes" in said) == bool(limit)  # which one made it wait
    assert (f"an access-policy window of {window} bytes on the timed stream" in said) == bool(window)


def test_refused_resets_and_a_missing_runtime_are_said():
    persisting = l2.PersistingL2(FakeRuntime(window=1, refuse=True), sync=lambda: None)
    persisting.reset(0)
    assert "refused 2 persisting L2 resets" in " ".join(persisting.notes())
    missing = l2.PersistingL2(None, missing="cuda.bindings.runtime: ImportError: no module")
    missing.reset(0)
    assert "were not reset before cold samples" in missing.notes()[0]


def test_a_cold_sample_resets_before_its_eviction_read():
    order = []

    class Recording:
        runtime = object()

        def reset(self, stream):
            order.append(("reset", stream))

    flush = torch.ones(1024)
    before = samplers.cold_before(flush, Recording(), stream=0x42)
    original = samplers.evict
    try:
        samplers.evict = lambda buffer: order.append(("evict", buffer.numel()))
        before()
    finally:
        samplers.evict = original
    assert order == [("reset", 0x42), ("evict", 1024)]
    plain = samplers.cold_before(flush, l2.PersistingL2.open("cpu"))  # no runtime: the eviction alone
    plain()


def test_the_ctypes_window_is_laid_out_as_cuda_runtime_declares_it():
    # cudaAccessPolicyWindow: void *base_ptr; size_t num_bytes; float hitRatio; enum hitProp; enum missProp
    assert ctypes.sizeof(l2._Window) == 32
    assert [getattr(l2._Window, f).offset for f in ("base_ptr", "num_bytes", "hitRatio", "hitProp", "missProp")] == [
        0, 8, 16, 20, 24]
    assert ctypes.sizeof(l2._AttrValue) == 64


@pytest.mark.parametrize("which", ["bindings", "ctypes"])
def test_each_runtime_path_calls_without_raising_where_there_is_no_gpu(which):
    # Real calls into cuda-python's runtime and into libcudart: their names and arguments are right (a wrong one
    # raises here); without a driver they answer an error code, which a reset counts instead of raising.
    if which == "bindings":
        rt = pytest.importorskip("cuda.bindings.runtime")
        runtime = l2._Bindings(rt)
    else:
        for name in l2.CUDART_NAMES:
            try:
                runtime = l2._Ctypes(ctypes.CDLL(name))
                break
            except OSError:
                continue
        else:
            pytest.skip("no libcudart here")
    assert isinstance(runtime.limit(), int)
    assert isinstance(runtime.window_bytes(0), int)
    assert isinstance(runtime.set_window(0, 0, 0, 0.0, l2.NORMAL, l2.NORMAL), int)
    assert isinstance(runtime.reset_lines(), int)
    if torch.cuda.is_available():
        return
    assert runtime.reset_lines() != 0  # no driver: the error code comes back
    persisting = l2.PersistingL2(runtime, sync=lambda: None)
    persisting.reset(0)
    assert persisting.failed == 1


def test_load_runtime_finds_one_here():
    runtime, why = l2.load_runtime()
    assert runtime is not None, why


# ---- GPU: a pinned input is not timed from the L2 ---------------------------------------------------------------


@pytest.fixture
def resident_impls():
    from kernelkit.loading import load

    op = load(str(CHEATS / "gpu_cheats.py"))["resident"]
    pinned = op.get_impl("eager_persisting_window").fn
    yield op, op.get_impl("eager_honest").fn, pinned
    pinned.__globals__["unpin_l2"]()  # the set-aside is the process's: give it back for the tests after this one


def _cold_median(fn, x):
    import kernelkit as kk

    return kk.bench(fn, x, mode="cold", budget=1.0).median


@pytest.mark.gpu
def test_a_persisting_window_on_the_input_does_not_speed_up_cold_samples(resident_impls):
    op, honest, pinned = resident_impls
    (x,) = op.make_inputs(op.sizes[0], torch.float32, torch.device("cuda"), 1)
    honest_s = _cold_median(honest, x)
    pinned_s = _cold_median(pinned, x)
    assert pinned_s >= 0.9 * honest_s, f"pinned {pinned_s * 1e6:.2f} us, honest {honest_s * 1e6:.2f} us"


@pytest.mark.gpu
def test_without_the_reset_the_persisting_window_would_win(resident_impls, monkeypatch):
    # The control: the cheat is real. With the reset turned off, the pinned input is read from the L2.
    op, honest, pinned = resident_impls
    (x,) = op.make_inputs(op.sizes[0], torch.float32, torch.device("cuda"), 1)
    honest_s = _cold_median(honest, x)
    monkeypatch.setattr(l2.PersistingL2, "reset", lambda self, stream: None)
    pinned_s = _cold_median(pinned, x)
    assert pinned_s < 0.9 * honest_s, f"pinned {pinned_s * 1e6:.2f} us, honest {honest_s * 1e6:.2f} us"


@pytest.mark.gpu
def test_a_cold_gpu_result_says_its_l2_lines_were_reset():
    import kernelkit as kk

    m = kk.bench(lambda t: t * 2, torch.ones(1 << 20, device="cuda"), mode="cold", budget=0.3)
    assert "resetting persisting L2 lines" in m.method


@pytest.mark.gpu
def test_a_reset_with_nothing_pinned_is_cheap_on_a_gpu():
    persisting = l2.PersistingL2.open("cuda")
    assert persisting.runtime is not None, persisting.missing
    stream = torch.cuda.current_stream().cuda_stream
    persisting.reset(stream)
    calls = 1000
    start = time.perf_counter()
    for _ in range(calls):
        persisting.reset(stream)
    per_call = (time.perf_counter() - start) / calls
    assert persisting.failed == 0 and persisting.waited == 0, persisting.notes()
    assert per_call < 20e-6, f"{per_call * 1e6:.1f} us per reset"  # host time, before each cold sample


@pytest.mark.parametrize(("at_open", "words"), [(4 << 20, "there when this timing session began"),
                                                (0, "was 0 bytes when this timing session began: set while it ran"),
                                                (-1, "")])
def test_the_note_says_whether_the_set_aside_was_there_when_the_session_began(at_open, words):
    # An H200 run found a set-aside of 11796480 bytes before every cold sample, anchors included, with no cheat
    # loaded: whether it came with the process or was set during the session tells where to look.
    persisting = l2.PersistingL2(FakeRuntime(limit=4 << 20, window=0), sync=lambda: None, at_open=at_open)
    persisting.reset(0x7F)
    said = " ".join(persisting.notes())
    assert "a persisting L2 set-aside of 4194304 bytes" in said
    assert (words in said) if words else "session began" not in said
