"""Time callables the way GPU work must be timed: warm-up, a stopping rule on measured noise, clock checks.

``bench(fn, *args)`` times one callable. ``bench_many`` times several side by side, interleaved batch by batch
(A B A B ...), so slow drift (clocks, temperature, a neighbour's load) falls on all of them alike: that is
how the impls of a case and their baselines are compared.

Per contender:
1. the first call is timed alone and reported apart (JIT compile, autotune, module load);
2. warm-up: single calls until the last three agree within 5% (so it lasts longer for a slower call), at most
   ``WARMUP_MAX_CALLS`` or ``WARMUP_MAX_SECONDS``;
3. sampling in batches sized to about ``BATCH_SECONDS`` of work, until the median's relative standard error is
   under ``rse_target`` with at least ``min_samples`` samples and ``min_time`` seconds of timed work
   ("converged"), or the wall-clock ``budget`` is spent ("budget"), or ``max_samples`` ("max_samples");
4. on a GPU with NVML, the SM clock is read with each batch; samples taken under 75% of the maximum SM clock
   are dropped and counted. Nothing about the GPU's clocks or power is ever changed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelkit.measure import samplers
from kernelkit.measure.measurement import MODES, Measurement
from kernelkit.measure.samplers import MeasureError
from kernelkit.measure.stats import median_rse, quantile

DEFAULT_BUDGET = 10.0  # seconds of wall clock per contender, at most
DEFAULT_RSE = 0.005
MIN_SAMPLES = 10
MIN_TIME = 0.01  # seconds of timed work (GPU time on a GPU) before the noise rule may stop sampling
MAX_SAMPLES = 20_000
BATCH_SECONDS = 0.02
MAX_BATCH = 200
WARMUP_AGREE = 0.05
WARMUP_MAX_CALLS = 100
WARMUP_MAX_SECONDS = 1.0
LAUNCH_BOUND_RATIO = 1.5
LAUNCH_BOUND_GAP = 5e-6
PROBE_BELOW = 2e-4  # event medians under this get a kernel-time probe (the launch-bound check)
PROBE_CALLS = 20


@dataclass
class Contender:
    """One callable to time, with the cost model of one call."""

    label: str
    fn: Callable[[], Any]
    bytes: int | None = None
    flops: int | None = None
    working_set: int | None = None  # bytes the call touches, for the graph-mode cache warning
    first_call: float | None = None  # seconds, when the caller already made (and timed) the first call


@dataclass(frozen=True)
class MeasureFailure:
    """A contender that could not be timed: the others of its bench_many call still are."""

    label: str
    error: BaseException


@dataclass
class _State:
    contender: Contender
    sampler: Any
    first_call: float
    warmup_calls: int
    estimate: float
    samples: list[float] = field(default_factory=list)
    clocks: list[float] = field(default_factory=list)
    dropped: int = 0
    spent: float = 0.0
    stop_reason: str = ""


@dataclass(frozen=True)
class Settings:
    """The stopping rule and budget; defaults are the engine's."""

    mode: str = "cold"
    budget: float = DEFAULT_BUDGET
    rse_target: float = DEFAULT_RSE
    min_samples: int = MIN_SAMPLES
    min_time: float = MIN_TIME
    max_samples: int = MAX_SAMPLES
    launch_check: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise MeasureError(f"unknown mode {self.mode!r}; use one of {', '.join(MODES)}")
        if self.budget <= 0 or self.rse_target <= 0 or self.min_samples < 1:
            raise MeasureError("budget and rse target must be positive, min samples at least 1")


def bench(
    fn: Callable[..., Any],
    *args: Any,
    mode: str = "cold",
    bytes: int | None = None,  # noqa: A002 - the cost model's word
    flops: int | None = None,
    budget: float = DEFAULT_BUDGET,
    rse_target: float = DEFAULT_RSE,
    label: str = "",
    device: str | None = None,
) -> Measurement:
    """Time ``fn(*args)`` and return a Measurement (seconds per call, with statistics and how it stopped).

    mode: cold (L2 evicted before every sample; default), hot, graph (CUDA-graph replay) or kernel (profiler
    device time). device: 'cuda' or 'cpu'; by default where the tensor arguments are, and for a callable with
    no tensor arguments the GPU when one is visible (CPU timings are CPU work timed with perf_counter_ns, never
    GPU performance).
    """
    working = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
    contender = Contender(label or getattr(fn, "__name__", "call"), lambda: fn(*args), bytes, flops, working)
    settings = Settings(mode=mode, budget=budget, rse_target=rse_target)
    (result,) = bench_many([contender], settings, device=device or _device_of(args))
    if isinstance(result, MeasureFailure):
        raise result.error
    return result


def bench_many(
    contenders: Sequence[Contender], settings: Settings, device: str
) -> list[Measurement | MeasureFailure]:
    """Time every contender, interleaved batch by batch; each stops on its own rule, the last stops the loop.

    A contender that raises is dropped with its exception (a MeasureFailure in its place); the others go on.
    """
    if not contenders:
        return []
    env = _Environment.open(device, settings.mode)
    try:
        states: list[_State | MeasureFailure] = [_guarded(c.label, _start, c, settings, env) for c in contenders]
        active = [s for s in states if isinstance(s, _State)]
        while active:
            for state in list(active):
                failure = _guarded(state.contender.label, _take_batch, state, env)
                reason = _stop_reason(state, settings) if failure is None else "failed"
                if reason:
                    state.stop_reason = reason
                    active.remove(state)
                if failure is not None:
                    states[states.index(state)] = failure
        results = [s if isinstance(s, MeasureFailure) else _guarded(s.contender.label, _finish, s, settings, env)
                   for s in states]
        _launch_check(states, results, settings, env)
        return results
    finally:
        env.close()


def _guarded(label: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one contender's failure must not end the others' timing
        return MeasureFailure(label, exc)


def eviction_for(env: _Environment) -> torch.Tensor | None:
    """Cold mode probes kernels with the cache evicted, as its samples are taken; hot mode without."""
    return samplers.eviction_buffer(env.cache_bytes, "cuda") if env.mode == "cold" else None


def _device_of(args: Sequence[Any]) -> str:
    """Where the tensor arguments live; with none (a closure), the GPU when there is one."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if tensors:
        return "cuda" if any(t.is_cuda for t in tensors) else "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class _Environment:
    device: str
    mode: str
    device_name: str
    cache_bytes: int
    clock: Any = None  # measure.clocks.ClockReader, when NVML is available
    max_clock: float | None = None

    @classmethod
    def open(cls, device: str, mode: str) -> _Environment:
        from kernelkit.measure import clocks
        from kernelkit.measure import fingerprint as host

        if device == "cuda":
            if not torch.cuda.is_available():
                raise MeasureError("device cuda asked for, but no GPU is visible; time on the CPU instead")
            index = torch.cuda.current_device()
            clock = clocks.ClockReader.open(index)
            max_clock = clock.max_sm_clock_mhz() if clock is not None else None
            return cls(device, mode, torch.cuda.get_device_name(index), host.l2_bytes(torch.device("cuda")),
                       clock, max_clock)
        if device != "cpu":
            raise MeasureError(f"unknown device {device!r}; use cpu or cuda")
        return cls(device, mode, host.device_name("cpu"), host.l2_bytes(torch.device("cpu")))

    def sampler(self, fn: Callable[[], Any], estimate: float) -> Any:
        if self.device == "cpu":
            return samplers.CpuSampler(fn, self.mode, self.cache_bytes)
        if self.mode == "graph":
            return samplers.GraphSampler(fn, estimate, self.clock)
        if self.mode == "kernel":
            return samplers.KernelSampler(fn, self.cache_bytes)
        return samplers.EventSampler(fn, self.mode, self.cache_bytes, self.clock)

    def warmup_sampler(self, fn: Callable[[], Any]) -> Any:
        """Warm-up times single calls back to back in every mode; the estimate sizes batches and graph captures."""
        if self.device == "cpu":
            return samplers.CpuSampler(fn, "hot", self.cache_bytes)
        return samplers.EventSampler(fn, "hot", self.cache_bytes)

    def kernel_times(self, fns: Sequence[Callable[[], Any]]) -> list[float | None]:
        """Median device time of each callable's kernels over PROBE_CALLS calls, all in one profiler session
        (starting one costs a good fraction of a second); None where a callable launched no kernel."""
        calls = [fn for fn in fns for _ in range(PROBE_CALLS)]
        try:
            times = samplers.profile_calls(calls, eviction_for(self))
        except MeasureError:
            return [None] * len(fns)
        out: list[float | None] = []
        for i in range(len(fns)):
            mine = sorted(times[i * PROBE_CALLS:(i + 1) * PROBE_CALLS])
            out.append(quantile(mine, 0.5) if any(mine) else None)
        return out

    def close(self) -> None:
        if self.clock is not None:
            self.clock.close()


def _start(contender: Contender, settings: Settings, env: _Environment) -> _State:
    """First call timed alone, then warm-up; returns the contender's state ready for sampling."""
    plain = env.warmup_sampler(contender.fn)
    first = contender.first_call if contender.first_call is not None else first_call(contender.fn, env.device)
    warm: list[float] = []
    began = time.perf_counter()
    while len(warm) < WARMUP_MAX_CALLS and time.perf_counter() - began < WARMUP_MAX_SECONDS:
        warm.append(plain.one())
        if len(warm) >= 3 and _agree(warm[-3:]):
            break
    estimate = quantile(sorted(warm[-3:]), 0.5)
    return _State(contender, env.sampler(contender.fn, estimate), first, len(warm), estimate)


def first_call(fn: Callable[[], Any], device: str) -> float:
    """Seconds of one call made alone, synchronized on both sides: a first call's compile, autotune and load."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _agree(values: Sequence[float]) -> bool:
    mid = quantile(sorted(values), 0.5)
    return mid > 0 and all(abs(v - mid) <= WARMUP_AGREE * mid for v in values)


def batch_size(estimate: float) -> int:
    """Samples per batch: about BATCH_SECONDS of work, between 1 and MAX_BATCH."""
    if estimate <= 0:
        return MAX_BATCH
    return max(1, min(MAX_BATCH, int(BATCH_SECONDS / estimate)))


def _take_batch(state: _State, env: _Environment) -> None:
    began = time.perf_counter()
    for seconds, mhz in state.sampler.batch(batch_size(state.estimate)):
        if mhz is not None and env.max_clock and not _clock_ok(mhz, env.max_clock):
            state.dropped += 1
            continue
        state.samples.append(seconds)
        if mhz is not None and not math.isnan(mhz):
            state.clocks.append(mhz)
    state.spent += time.perf_counter() - began
    if state.samples:
        state.estimate = quantile(sorted(state.samples[-MAX_BATCH:]), 0.5)


def _clock_ok(mhz: float, max_mhz: float) -> bool:
    from kernelkit.measure.clocks import keep_sample

    return keep_sample(mhz, max_mhz)


def _stop_reason(state: _State, settings: Settings) -> str:
    """'converged', 'budget', 'max_samples', or '' to go on."""
    n = len(state.samples)
    timed = math.fsum(state.samples) * state.sampler.calls_per_sample
    if n >= settings.min_samples and timed >= settings.min_time and median_rse(state.samples) <= settings.rse_target:
        return "converged"
    if state.spent >= settings.budget:
        return "budget"
    if n + state.dropped >= settings.max_samples:
        return "max_samples"
    return ""


def _finish(state: _State, settings: Settings, env: _Environment) -> Measurement:
    c = state.contender
    warnings: list[str] = []
    samples = state.samples
    if not samples:
        raise MeasureError(
            f"{c.label}: every one of {state.dropped} samples ran under 75% of the maximum SM clock "
            f"({env.max_clock:g} MHz); the GPU is throttling (power, thermal) or shared. Try again when it is idle"
        )
    m = Measurement(
        label=c.label, mode=settings.mode, device=env.device, device_name=env.device_name, samples=samples,
        first_call=state.first_call, warmup_calls=state.warmup_calls, stop_reason=state.stop_reason,
        calls_per_sample=state.sampler.calls_per_sample, dropped=state.dropped, clocks_mhz=state.clocks,
        max_clock_mhz=env.max_clock, bytes=c.bytes, flops=c.flops, warnings=warnings,
    )
    if state.dropped:
        warnings.append(f"{state.dropped} samples dropped: taken under 75% of the maximum SM clock")
    if m.stats.noisy:
        warnings.append(f"noisy: IQR is {m.stats.iqr_rel:.0%} of the median")
    if env.mode == "graph" and c.working_set is not None and c.working_set <= env.cache_bytes:
        warnings.append(
            f"graph mode: the inputs ({c.working_set / 2**20:.1f} MiB) fit in L2 ({env.cache_bytes / 2**20:.0f} MiB), "
            f"so the {m.calls_per_sample} unrolled calls read warm cache; use cold mode for a cold-cache time"
        )
    if env.mode == "kernel":
        m.kernel_seconds = m.median
    return m


def _launch_check(states: Sequence[_State | MeasureFailure], results: list[Any], settings: Settings,
                  env: _Environment) -> None:
    """Event-timed results under PROBE_BELOW get their kernel time and, when far below, a launch-bound warning."""
    if env.device != "cuda" or env.mode not in ("cold", "hot") or not settings.launch_check:
        return
    picked = [i for i, m in enumerate(results) if isinstance(m, Measurement) and m.median < PROBE_BELOW]
    if not picked:
        return
    fns = [states[i].contender.fn for i in picked]  # type: ignore[union-attr]
    for i, kernel in zip(picked, env.kernel_times(fns), strict=True):
        m = results[i]
        m.kernel_seconds = kernel
        warning = launch_bound_warning(m.median, kernel)
        if warning:
            m.warnings.append(warning)


def launch_bound_warning(event_seconds: float, kernel_seconds: float | None) -> str:
    """A warning when event time is far above kernel time (over 1.5x and more than 5 us apart), else ''."""
    if kernel_seconds is None or kernel_seconds <= 0:
        return ""
    if event_seconds > LAUNCH_BOUND_RATIO * kernel_seconds and event_seconds - kernel_seconds > LAUNCH_BOUND_GAP:
        return (
            f"launch-bound: {event_seconds * 1e6:.1f} us per call between events but {kernel_seconds * 1e6:.1f} us "
            "of kernel time; the host's launch path dominates (see --mode kernel for device time, graph to hide it)"
        )
    return ""
