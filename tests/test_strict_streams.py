"""Strict mode's stream watch (jobs/guards.py StreamWatch), on the CPU with a stand-in for torch's current stream:
a switch to another stream is seen when it is made, and work launched while another stream is current is seen
whatever its length; the timed stream itself is never reported, and nothing is watched off a GPU. The GPU run
proves it on real streams (tests/test_strict.py, tiny_stream in tests/cheats/gpu_cheats.py)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from kernelkit.jobs import guards
from kernelkit.jobs.strict_worker import CallRecord, _device_kernels
from kernelkit.results import Status
from kernelkit.runs.strict import Prepared, _judge_call

TIMED, SIDE = (0, 0x0), (0, 0x5A5A)


class Streams:
    """torch's current stream as (device, raw handle), and torch._C's setter that changes it."""

    def __init__(self) -> None:
        self.now = TIMED

    def current(self) -> tuple[int, int]:
        return self.now

    def setter(self, **kwargs) -> None:
        self.now = (kwargs["device_index"], kwargs["stream_id"])


def _watch(monkeypatch) -> tuple[guards.StreamWatch, Streams]:
    streams = Streams()
    monkeypatch.setattr(torch._C, "_cuda_setStream", streams.setter, raising=False)
    return guards.StreamWatch(True, current=streams.current), streams


def test_a_switch_to_another_stream_is_seen_when_it_is_made(monkeypatch):
    watch, streams = _watch(monkeypatch)
    side = SimpleNamespace(stream_id=SIDE[1], device_index=0, device_type=1)
    with watch:
        torch.cuda.set_stream(side)  # torch.cuda.stream(s) ends in the same setter
        torch.cuda.set_stream(SimpleNamespace(stream_id=TIMED[1], device_index=0, device_type=1))
    assert len(watch.seen) == 1 and watch.seen[0].startswith("a switch of torch's current stream on stream 0x5a5a")
    assert torch._C._cuda_setStream == streams.setter  # unwrapped once the call is over


def test_work_launched_while_another_stream_is_current_is_seen_however_it_got_there(monkeypatch):
    # A switch made in C++ (torch.Stream's own context manager) runs no Python setter: the aten op shows it.
    watch, streams = _watch(monkeypatch)
    x = torch.ones(16, 16)
    with watch, guards.GuardedAllocations(watch):
        x * x  # on the timed stream: nothing to say
        streams.now = SIDE
        torch.mul(x, x)
        torch.mul(x, x)  # the same op again: said once
        streams.now = TIMED
    assert watch.seen == ["aten::mul on stream 0x5a5a of cuda:0 (the timed stream is 0x0)"]


def test_a_call_that_returns_on_another_stream_is_seen(monkeypatch):
    watch, streams = _watch(monkeypatch)
    with watch:
        streams.now = SIDE
    assert watch.seen and watch.seen[0].startswith("the call returned with torch's current stream on stream 0x5a5a")
    with watch:  # each call starts with nothing seen, on the stream current when it began
        pass
    assert watch.seen == []


def test_nothing_is_watched_off_a_gpu(monkeypatch):
    streams = Streams()
    monkeypatch.setattr(torch._C, "_cuda_setStream", streams.setter, raising=False)
    watch = guards.StreamWatch(False, current=streams.current)
    with watch:
        assert torch._C._cuda_setStream == streams.setter
        streams.now = SIDE
        watch.look("aten::mul")
    assert watch.seen == []


def test_what_the_watch_saw_is_cheated_with_where_it_ran():
    x = torch.ones(4)
    prepared = Prepared([(x,)], [(x.double(),)], [(x,)], "tensor", None, [((4,), 1, False)])
    record = CallRecord(streams=["aten::mul on stream 0x5a5a of cuda:0 (the timed stream is 0x0)"])
    status, message = _judge_call(0, 0, record, prepared, [], 1e-5, 1e-5, [])
    assert status is Status.CHEATED and "another stream" in message and "0x5a5a" in message


class _Event:
    def __init__(self, name: str, stream: int, start: int) -> None:
        self._name, self._stream, self._start = name, stream, start

    def device_type(self) -> str:
        return "DeviceType.CUDA"

    def name(self) -> str:
        return self._name

    def device_resource_id(self) -> int:
        return self._stream

    def start_ns(self) -> int:
        return self._start

    def duration_ns(self) -> int:
        return 2000


def _profile(*events: _Event) -> SimpleNamespace:
    return SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: list(events))))


def test_the_profiled_call_names_work_off_the_stream_of_its_marker():
    spin = "at::cuda::(anonymous namespace)::spin_kernel(long)"
    kernels, off = _device_kernels(_profile(
        _Event(spin, 7, 100),  # the marker, first on the timed stream
        _Event("vectorized_elementwise_kernel<mul>", 13, 300),  # 2 us of work, on another stream
        _Event(spin, 13, 200),  # the impl's own spin: not the marker, it started later
        _Event("Memcpy DtoD (Device -> Device)", 7, 400)))
    assert [name for name, _, _ in kernels] == ["vectorized_elementwise_kernel<mul>", spin]  # marker left out
    assert len(off) == 2 and all("stream 13 (the timed stream is 7" in line for line in off)
    _, none = _device_kernels(_profile(_Event("vectorized_elementwise_kernel<mul>", 13, 300)))
    assert none == []  # no marker: no stream named timed (the call's streams are still counted)
