"""What one timing session needs from its device: the samplers of each mode, the shared eviction buffer and its
cost, the clock reader, and the kernel-time probe. The timer (timer.py) opens one per ``bench_many`` call."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from kernelkit.measure import bound, modes, samplers
from kernelkit.measure.l2 import PersistingL2
from kernelkit.measure.modes import Mode
from kernelkit.measure.samplers import MeasureError

if TYPE_CHECKING:
    from kernelkit.measure.contender import Contender
    from kernelkit.measure.kernel_time import KernelTimer


@dataclass
class Environment:
    """One device and mode for one timing session; ``close()`` releases NVML."""

    device: str  # "cuda" or "cpu"
    mode: Mode
    device_name: str
    cache_bytes: int  # the GPU's L2, or the CPU's last-level cache
    clock: Any = None  # measure.clocks.ClockReader, when NVML is available
    max_clock: float | None = None
    graph_warm: bool = False
    _flush: torch.Tensor | None = field(default=None, repr=False)
    _evict_seconds: float | None = field(default=None, repr=False)
    _kernel_timer: KernelTimer | None = field(default=None, repr=False)
    _l2: PersistingL2 | None = field(default=None, repr=False)

    @classmethod
    def open(cls, device: str, mode_name: str, graph_warm: bool = False) -> Environment:
        from kernelkit.measure import clocks, host

        mode = modes.get(mode_name)
        if device == "cuda":
            if not torch.cuda.is_available():
                raise MeasureError("device cuda asked for, but no GPU is visible; time on the CPU instead")
            index = torch.cuda.current_device()
            clock = clocks.ClockReader.open(index)
            max_clock = clock.max_sm_clock_mhz() if clock is not None else None
            return cls(device, mode, torch.cuda.get_device_name(index), host.l2_bytes(torch.device("cuda")),
                       clock, max_clock, graph_warm)
        if device != "cpu":
            raise MeasureError(f"unknown device {device!r}; use cpu or cuda")
        return cls(device, mode, host.device_name("cpu"), host.l2_bytes(torch.device("cpu")))

    # --- eviction --------------------------------------------------------------------------------------------

    @property
    def flush(self) -> torch.Tensor:
        """The eviction buffer every sampler of this session reads (one allocation, not one per contender)."""
        if self._flush is None:
            self._flush = samplers.eviction_buffer(samplers.eviction_bytes(self.cache_bytes, self.device),
                                                   self.device)
        return self._flush

    def eviction_seconds(self) -> float:
        """Seconds one eviction takes (measured once, after an untimed first pass): part of a cold sample's cost."""
        if self._evict_seconds is None:
            samplers.evict(self.flush)
            self._sync()
            start = bound.perf_counter()
            samplers.evict(self.flush)
            self._sync()
            self._evict_seconds = bound.perf_counter() - start
        return self._evict_seconds

    @property
    def l2(self) -> PersistingL2:
        """What cold samples reset before their eviction (measure/l2.py): nothing on the CPU."""
        if self._l2 is None:
            self._l2 = PersistingL2.open(self.device)
        return self._l2

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def notes(self) -> list[str]:
        """Warnings every result of this session carries (a capped CPU eviction; on a GPU, persisting L2 lines that
        could not be reset, or samples that waited for their reset)."""
        if self.mode.evicts and self.device == "cpu":
            note = samplers.eviction_note(self.cache_bytes, self.device)
            return [note] if note else []
        if self.mode.evicts and self._l2 is not None:
            return self._l2.notes()
        return []

    # --- samplers --------------------------------------------------------------------------------------------

    def sampler(self, contender: Contender, estimate: float) -> Any:
        """The sampler of this session's mode for ``contender``, sized from its warm-up ``estimate`` (seconds per
        call); see measure/modes.py."""
        return self.mode.sampler(self, contender, estimate)

    def warmup_sampler(self, fn: Callable[[], Any]) -> Any:
        """Warm-up times single calls back to back in every mode; the estimate sizes batches and graph captures."""
        if self.device == "cpu":
            return samplers.CpuSampler(fn, 1, None)  # one call per sample, nothing evicted
        return samplers.EventSampler(fn, None)

    # --- kernel time -----------------------------------------------------------------------------------------

    @property
    def kernel_timer(self) -> KernelTimer:
        if self._kernel_timer is None:
            from kernelkit.measure.kernel_time import KernelTimer

            self._kernel_timer = KernelTimer.open()
        return self._kernel_timer

    def kernel_times(self, fns: Sequence[Callable[[], Any]], calls: Sequence[int]) -> list[float | None]:
        """Median device time of each callable's own work over ``calls[i]`` calls, all in one tracing session
        (starting one costs a good fraction of a second), evicted first in cold mode; None where a callable
        launched nothing or the tracing failed."""
        from kernelkit.measure.stats import quantile

        flat = [fn for fn, n in zip(fns, calls, strict=True) for _ in range(n)]
        evicts = self.mode.evicts
        reset = None  # persisting L2 lines reset before each eviction, as before the samples
        if evicts and self.l2.runtime is not None:
            reset = functools.partial(self.l2.reset, torch.cuda.current_stream().cuda_stream)
        try:
            times = self.kernel_timer.times(flat, self.flush if evicts else None, reset)
        except MeasureError:
            return [None] * len(fns)
        out: list[float | None] = []
        at = 0
        for n in calls:
            mine = sorted(times[at:at + n])
            at += n
            out.append(quantile(mine, 0.5) if any(mine) else None)
        return out

    def close(self) -> None:
        if self.clock is not None:
            self.clock.close()
        self._flush = None
