"""graph mode: calls unrolled in a CUDA graph, each replay one sample of replay time / calls (no launch overhead).

Cold by default: a replay rotates over enough copies of the call's inputs that, between two uses of one copy, at
least FLUSH_FACTOR x the L2 of other data has streamed through, so every call reads its inputs from memory, as
in cold mode. Each call's output stays alive until its copy comes round again, so outputs rotate over as many
buffers. With ``warm=True`` (``--graph-warm``) every call reuses the same inputs: the L2 stays warm when they fit.

A replay unrolls enough calls to last about GRAPH_TARGET_SECONDS (short replays pay the graph launch's own
latency), at least one per copy and a whole number of rotations, at most GRAPH_MAX_CALLS.

A replay does no allocator work: every output was allocated once, from the graph's private pool, while it was
captured, and the replay writes to those same addresses. Rotating the outputs costs no more than cold mode's
own writes: each call writes to lines the L2 no longer holds, as a cold call does after the eviction. For a
tiny input (4096 floats) the rotation is 3201 copies of 16 KiB in and out, 100 MiB of the GPU's memory.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelkit.measure.samplers import FLUSH_FACTOR, MeasureError, Sample, event_samples

GRAPH_TARGET_SECONDS = 5e-3
GRAPH_MAX_CALLS = 8192
MakeCall = Callable[[tuple[Any, ...]], Callable[[], Any]]


@dataclass(frozen=True)
class Rotation:
    """How a graph replay stays cold: ``copies`` argument sets (the original first) used in turn."""

    copies: int
    copy_bytes: int  # bytes of one set of tensor arguments
    per_call_bytes: int  # bytes one call touches (inputs and outputs), what evicts the other copies

    def describe(self, cache_bytes: int) -> str:
        streamed = self.copies * self.per_call_bytes
        if self.copies == 1:
            return (f"graph replay, cold: each call touches {_mib(self.per_call_bytes)}, at least "
                    f"{FLUSH_FACTOR}x the {_mib(cache_bytes)} L2, so no copies are needed")
        return (f"graph replay, cold: {self.copies} copies of the inputs ({_mib(self.copies * self.copy_bytes)}) "
                f"used in turn, {_mib(streamed)} streamed per rotation against a {_mib(cache_bytes)} L2")


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes < 10 * 2**20 else f"{nbytes / 2**20:.0f} MiB"


def copies_needed(per_call_bytes: int, cache_bytes: int) -> int:
    """Argument sets to rotate so that between two uses of one, FLUSH_FACTOR x the cache of other data streams."""
    if per_call_bytes <= 0:
        return 1
    if per_call_bytes >= FLUSH_FACTOR * cache_bytes:
        return 1  # one call alone streams more than the cache: the next call's data is already gone
    return 1 + math.ceil(FLUSH_FACTOR * cache_bytes / per_call_bytes)


def graph_calls(estimate: float, copies: int = 1) -> int:
    """Calls to unroll: about GRAPH_TARGET_SECONDS of work, a whole number of rotations, at most GRAPH_MAX_CALLS."""
    wanted = GRAPH_MAX_CALLS if estimate <= 0 else math.ceil(GRAPH_TARGET_SECONDS / estimate)
    calls = max(copies, wanted)
    calls = math.ceil(calls / copies) * copies
    return max(1, min(GRAPH_MAX_CALLS, calls))


def tensor_bytes(args: Sequence[Any]) -> int:
    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def _as_tuple(output: Any) -> tuple[Any, ...]:
    return tuple(output) if isinstance(output, (tuple, list)) else (output,)


class GraphSampler:
    """graph: replays of a CUDA graph of ``calls_per_sample`` unrolled calls, timed with an event pair each.

    fn: the call on the original arguments; args and make_call (a call on other arguments) allow a cold
    rotation; without them, or with ``warm``, the replay reuses the original arguments. ``warnings`` says when
    the replay is not as cold as asked; ``method`` how the samples are taken.
    """

    device = "cuda"

    def __init__(self, fn: Callable[[], Any], estimate: float, cache_bytes: int, *, args: Sequence[Any] = (),
                 make_call: MakeCall | None = None, per_call_bytes: int | None = None, warm: bool = False,
                 clock: Any = None) -> None:
        self.clock = clock
        self.warnings: list[str] = []
        calls, rotation = self._calls(fn, cache_bytes, args, make_call, per_call_bytes, warm)
        self.calls_per_sample = graph_calls(estimate, len(calls))
        self.graph = _capture(calls, self.calls_per_sample)
        self.method = (rotation.describe(cache_bytes) if rotation else "graph replay, warm: every call reuses "
                       "the same inputs") + f"; {self.calls_per_sample} calls per replay, per call = replay / calls"

    def _calls(self, fn: Callable[[], Any], cache_bytes: int, args: Sequence[Any], make_call: MakeCall | None,
               per_call_bytes: int | None, warm: bool) -> tuple[list[Callable[[], Any]], Rotation | None]:
        copy_bytes = tensor_bytes(args)
        if warm:
            return [fn], None
        if make_call is None or copy_bytes == 0:
            self.warnings.append("graph mode: the call's tensor arguments are not known (a closure?), so its "
                                 "graph replays warm; pass the tensors as arguments to time it cold")
            return [fn], None
        from kernelkit.verify import fresh_copies  # same strides and alignment as the originals

        if per_call_bytes is None:  # outputs unknown: one call on a copy shows them
            per_call_bytes = copy_bytes + tensor_bytes(_as_tuple(make_call(fresh_copies(args))()))
        per_call = max(per_call_bytes, copy_bytes)
        needed = copies_needed(per_call, cache_bytes)
        copies = min(needed, GRAPH_MAX_CALLS)
        if copies < needed:  # tiny calls and a huge L2: one replay cannot hold enough copies
            self.warnings.append(f"graph mode: {copies} input copies in one replay stream {_mib(copies * per_call)},"
                                 f" under {FLUSH_FACTOR}x the {_mib(cache_bytes)} L2: the replay is partly warm")
        calls = [fn] + [make_call(fresh_copies(args)) for _ in range(copies - 1)]
        return calls, Rotation(copies, copy_bytes, per_call)

    def one(self) -> float:
        return self.batch(1)[0][0]

    def batch(self, k: int, deadline: float | None = None) -> list[Sample]:
        return event_samples(self.graph.replay, k, deadline, self.clock, calls_per_sample=self.calls_per_sample)


def _capture(calls: Sequence[Callable[[], Any]], unrolled: int) -> torch.cuda.CUDAGraph:
    """A graph of ``unrolled`` calls, call i being calls[i % len(calls)]; each output lives until its call's turn
    comes round again, so outputs rotate over len(calls) buffers of the graph's memory pool."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):  # warm up on the capture stream, as CUDA graphs require
            for call in calls[:2]:
                call()
                call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        kept: collections.deque[Any] = collections.deque(maxlen=len(calls))
        with torch.cuda.graph(graph):
            for i in range(unrolled):
                kept.append(calls[i % len(calls)]())
        kept.clear()
    except Exception as exc:  # noqa: BLE001 - any capture failure has the same remedy
        torch.cuda.synchronize()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MeasureError(
            f"mode graph: the call cannot be captured in a CUDA graph ({type(exc).__name__}: {first}); it may "
            "synchronize, copy to the host or allocate outside torch's allocator. Use --mode cold or kernel"
        ) from None
    torch.cuda.synchronize()
    return graph
