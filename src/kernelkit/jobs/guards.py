"""What strict mode watches in the process that runs an impl: the harness left as it was, allocations fenced
by canaries, threads and late writes after a call returns, the declared kernels launched.

- ``Seal`` (seal.py): the objects the harness relies on, down to their code, captured when kernelkit is
  imported, before any user code; ``tampered()`` names every one replaced or rewritten since.
- ``GuardedAllocations``: a dispatch mode that gives every tensor the call allocates through torch.empty and
  its kin a padded allocation, GUARD_BYTES of canary before and after, the tensor's own bytes poisoned
  (all 0xFF: NaN in every float dtype), so a write past either end and a read of memory never written both show.
- ``LaunchWatch``: wraps the launch method of each declared kernel object for the call (Triton's ``run``, a
  CudaKernel's ``launch``) and counts launches: the backend's own launch path, on the CPU interpreter too.
- ``StreamWatch``: on a GPU, work a call puts on any stream but the timed one, however short: switches of torch's
  current stream, and aten ops and declared kernels launched while another stream is current.
- ``new_threads``: threads alive after a call that were not before it.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

GUARD_BYTES = 16 << 10  # canary bytes on each side: more than one Triton block of 1024 fp32 past the end
CANARY = 0xA5
POISON = 0xFF  # NaN in every float dtype; -1 in signed integers

_FACTORIES = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
              "new_zeros"}


# ---- guard regions ------------------------------------------------------------------------------------------


@dataclass
class Fence:
    """One padded allocation: the canary bytes around ``nbytes`` of tensor data at ``GUARD_BYTES``."""

    buffer: torch.Tensor
    nbytes: int
    label: str

    def breach(self) -> str:
        """'' when both guards hold; else which side was written and how far from the tensor's bytes."""
        head = self.buffer[:GUARD_BYTES]
        tail = self.buffer[GUARD_BYTES + self.nbytes:]
        bad_tail = torch.nonzero(tail != CANARY)
        if bad_tail.numel():
            first, last = int(bad_tail[0, 0]), int(bad_tail[-1, 0])
            return (f"{self.label}: {last + 1 - first} bytes written past its end (from byte {first} to {last} after "
                    "it)")
        bad_head = torch.nonzero(head != CANARY)
        if bad_head.numel():
            return f"{self.label}: bytes written up to {GUARD_BYTES - int(bad_head[0, 0])} before its start"
        return ""


class GuardedAllocations(TorchDispatchMode):
    """Every tensor allocated by torch.empty/zeros and their kin inside the block sits between canaries; with
    ``streams``, every aten op is also looked at for the stream it is launched on."""

    def __init__(self, streams: StreamWatch | None = None) -> None:
        super().__init__()
        self.fences: list[Fence] = []
        self.streams = streams

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if self.streams is not None:
            self.streams.look(f"aten::{name}")
        out = func(*args, **(kwargs or {}))
        if name not in _FACTORIES or not isinstance(out, torch.Tensor) or out.layout != torch.strided:
            return out
        if out.numel() == 0 or out.dtype == torch.bool or out.is_meta:
            return out
        return self._fenced(out, zero=name.endswith("zeros") or name.endswith("zeros_like"))

    def _fenced(self, like: torch.Tensor, zero: bool) -> torch.Tensor:
        span = 1 + sum((s - 1) * st for s, st in zip(like.shape, like.stride(), strict=True))
        item = like.element_size()
        nbytes = span * item
        buffer = torch.full((2 * GUARD_BYTES + nbytes,), CANARY, dtype=torch.uint8, device=like.device)
        buffer[GUARD_BYTES:GUARD_BYTES + nbytes].fill_(0 if zero else POISON)
        fenced = torch.empty(0, dtype=like.dtype, device=like.device)
        fenced.set_(buffer.untyped_storage(), GUARD_BYTES // item, like.shape, like.stride())
        if like.requires_grad:
            fenced.requires_grad_(True)
        shape = "x".join(map(str, like.shape))
        self.fences.append(Fence(buffer, nbytes, f"a {shape} {str(like.dtype).removeprefix('torch.')} tensor "
                                                 f"allocated by the call"))
        return fenced

    def breaches(self, outputs: Iterable[Any]) -> list[str]:
        """Every breached fence; an output's fence is named as that output."""
        ptrs = {o.untyped_storage().data_ptr(): i for i, o in enumerate(outputs) if isinstance(o, torch.Tensor)}
        found = []
        for fence in self.fences:
            text = fence.breach()
            if text:
                which = ptrs.get(fence.buffer.untyped_storage().data_ptr())
                found.append(text.replace("a ", f"output {which} (", 1).replace(" allocated by the call", ")", 1)
                             if which is not None else text)
        return found


def is_poison(t: torch.Tensor) -> bool:
    """Every byte of ``t`` is still the poison GuardedAllocations wrote: the output was never written."""
    if t.numel() == 0 or t.dtype == torch.bool:
        return False
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8) if t.element_size() else t  # a 0-dim tensor too
    return bool((raw == POISON).all())


# ---- the declared kernels launched ----------------------------------------------------------------------------

_LAUNCH_METHODS = ("run", "launch")


class LaunchWatch:
    """Counts launches of the impl's declared kernel objects while it is entered (restores them on exit); with
    ``streams``, each launch is also looked at for the stream it goes to (Triton and CudaKernel launch on torch's
    current stream)."""

    def __init__(self, kernels: Sequence[Any], streams: StreamWatch | None = None) -> None:
        self.launches: dict[str, int] = {}
        self.streams = streams
        self._hooked: list[tuple[Any, str, bool]] = []
        self._objects = [k for k in (_kernel_object(k) for k in kernels) if k is not None]

    @property
    def watched(self) -> list[str]:
        return list(self.launches)

    def __enter__(self) -> LaunchWatch:
        for obj in self._objects:
            for method in _LAUNCH_METHODS:
                if not _launches_through(obj, method):
                    continue
                original = getattr(obj, method, None)
                if not callable(original):
                    continue
                name = kernel_name(obj)
                self.launches.setdefault(name, 0)
                had = method in getattr(obj, "__dict__", {})
                try:
                    setattr(obj, method, self._counting(original, name))
                except (AttributeError, TypeError):
                    del self.launches[name]
                    continue
                self._hooked.append((obj, method, had))
                break
        return self

    def _counting(self, original: Any, name: str) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            if self.streams is not None:
                self.streams.look(f"kernel {name}")
            value = original(*args, **kwargs)
            self.launches[name] += 1  # a launch that raised did not run
            return value

        return launch

    def __exit__(self, *exc: object) -> None:
        for obj, method, had in reversed(self._hooked):
            if not had:
                try:
                    delattr(obj, method)
                except AttributeError:
                    pass
        self._hooked.clear()


def _launches_through(obj: Any, method: str) -> bool:
    """Whether ``obj[grid](...)`` / ``obj.launch(...)`` goes through ``method``: Triton's kernels (JITFunction,
    Autotuner, Heuristics, the interpreter's) through ``run``, a CudaKernel through ``launch``; others unwatched."""
    if method == "run":
        return type(obj).__module__.startswith("triton.")
    from kernelkit.backends.cuda.kernel import CudaKernel

    return method == "launch" and isinstance(obj, CudaKernel)


def _kernel_object(kernel: Any) -> Any:
    """The launchable object behind an impl's ``kernels=[...]`` entry (a LazyKernel is imported here)."""
    from kernelkit.backends.lazy import LazyKernel

    if isinstance(kernel, LazyKernel):
        try:
            return kernel()
        except Exception:  # noqa: BLE001 - a kernel module that fails to import: its impl fails on its own
            return None
    return kernel


def kernel_name(obj: Any) -> str:
    """The name a kernel launches under (what a profiler shows): a Triton function's, a CudaKernel's."""
    inner = getattr(obj, "fn", None)
    for candidate in (obj, inner, getattr(inner, "fn", None)):
        name = getattr(candidate, "__name__", None) or getattr(candidate, "name", None)
        if isinstance(name, str):
            return name
    return type(obj).__name__


# ---- streams -----------------------------------------------------------------------------------------------

# torch._C's setters, where torch.cuda.stream(), torch.cuda.set_stream and torch.accelerator.set_stream all end.
_STREAM_SETTERS = ("_cuda_setStream", "_accelerator_setStream")


def _current_stream() -> tuple[int, int]:
    """(device index, raw CUDA stream handle) of torch's current stream: ~0.3 us through torch._C's raw getter."""
    index = torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return index, int(raw(index)) if raw is not None else torch.cuda.current_stream(index).cuda_stream


class StreamWatch:
    """What a call put on a stream other than the timed one (torch's current stream when the call began).

    Entered around each call (``on``: a guarded call on a GPU; else it watches nothing). While entered, torch._C's
    stream setters are wrapped: a switch to another stream is seen when it is made, by a context manager or a setter,
    whether or not any work follows. ``look(what)``, called for each aten op (GuardedAllocations) and each declared
    kernel's launch (LaunchWatch), sees work launched while another stream is current, however it became current
    (C++ included). Neither depends on how long the work runs. ``seen`` lists what was found (at most SEEN_MAX).
    ``current`` reads (device, raw handle) of the current stream; tests give a stand-in.
    """

    SEEN_MAX = 4

    def __init__(self, on: bool, current: Callable[[], tuple[int, int]] | None = None) -> None:
        self.on = on
        self._current = current or _current_stream
        self.timed: tuple[int, int] | None = None
        self.seen: list[str] = []
        self._wrapped: list[tuple[str, Any]] = []

    def __enter__(self) -> StreamWatch:
        self.seen = []
        if not self.on:
            return self
        self.timed = self._current()
        for name in _STREAM_SETTERS:
            original = getattr(torch._C, name, None)
            if original is not None:
                setattr(torch._C, name, self._switching(original))
                self._wrapped.append((name, original))
        return self

    def _switching(self, original: Any) -> Any:
        def switch(*args: Any, **kwargs: Any) -> Any:
            value = original(*args, **kwargs)
            self.look("a switch of torch's current stream")
            return value

        return switch

    def look(self, what: str) -> None:
        """Note ``what`` when the current stream is not the timed one (nothing outside a call)."""
        if self.timed is None:
            return
        now = self._current()
        if now == self.timed or len(self.seen) >= self.SEEN_MAX or any(s.startswith(what + " ") for s in self.seen):
            return
        self.seen.append(f"{what} on stream {now[1]:#x} of cuda:{now[0]} (the timed stream is {self.timed[1]:#x})")

    def __exit__(self, *exc: object) -> None:
        if self.timed is not None:
            self.look("the call returned with torch's current stream")
        for name, original in reversed(self._wrapped):
            setattr(torch._C, name, original)
        self._wrapped.clear()
        self.timed = None


# ---- threads and late writes ------------------------------------------------------------------------------------


def live_threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def new_threads(before: set[threading.Thread]) -> list[str]:
    """Names of threads alive now that were not alive in ``before``."""
    return [t.name for t in threading.enumerate() if t not in before and t.is_alive()]


SETTLE_SECONDS = 0.003  # how long after a call returns its outputs must stay unchanged


def settled_copy(outputs: Sequence[Any], device: str) -> list[torch.Tensor | None]:
    """Copies of the tensor outputs (where they are: a device copy is a device-speed clone, and the one copy to the
    host is the message's), taken as soon as the call's own stream is done with them."""
    if device == "cuda":
        torch.cuda.current_stream().synchronize()
    copies = [o.detach().clone() if type(o) is torch.Tensor else None for o in outputs]
    if device == "cuda":
        torch.cuda.current_stream().synchronize()
    return copies


def changed_after_return(outputs: Sequence[Any], first: Sequence[torch.Tensor | None], device: str) -> list[int]:
    """Outputs whose bytes changed between ``first`` (right after the call) and now, once the whole device and
    SETTLE_SECONDS have passed: work that went on after the call returned (another stream, a thread)."""
    if device == "cuda":
        torch.cuda.synchronize()
    time.sleep(SETTLE_SECONDS)
    if device == "cuda":
        torch.cuda.synchronize()
    return [i for i, (a, b) in enumerate(zip(first, outputs, strict=True))
            if a is not None and type(b) is torch.Tensor and not _same_bytes(a, b.detach())]


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return bool(torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)))


def reachable_float64(shape: torch.Size) -> int:
    """How many float64 tensors of ``shape`` the garbage collector can reach here (a reference's outputs would
    be some): tests use it to show none is, in strict mode."""
    return sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and o.dtype == torch.float64
               and o.shape == shape)
