"""Time callables the way GPU work must be timed: warm-up, a stopping rule on measured noise, clock checks.

``bench(fn, *args)`` times one callable. ``bench_many`` times several side by side, interleaved batch by batch
(A B A B ...), so slow drift (clocks, temperature, a neighbour's load) falls on all of them alike: that is
how the impls of a case and their baselines are compared.

Per contender:
1. the first call is timed alone and reported apart (JIT compile, autotune, module load);
2. warm-up: single calls until the last three agree within 5% (so it lasts longer for a slower call), at most
   ``WARMUP_MAX_CALLS`` or ``WARMUP_MAX_SECONDS`` (or half the budget, when that is less: a CPU's short budget);
3. sampling in batches of about ``BATCH_SECONDS`` of wall clock, sized from what one sample really costs (the
   eviction, synchronize and tracing included, measured batch by batch), until the median's relative standard
   error is under ``rse_target`` with at least ``min_samples`` samples and ``min_time`` seconds of timed work
   ("converged"), or the wall-clock ``budget`` is spent ("budget": checked within a batch too, so one slow
   sample at most goes past it), or ``max_samples`` ("max_samples");
4. on a GPU with NVML, the SM clock is read with each batch (outside every timed window); samples taken under
   75% of the maximum SM clock are dropped and counted. Nothing about the GPU's clocks or power is ever changed.

A sample is seconds per call: in hot and graph mode the mean of the ``calls_per_sample`` calls it timed together,
so the stopping rule and the spread figures describe such means (narrower than single calls would be).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelkit.measure import bound, modes
from kernelkit.measure.contender import Contender
from kernelkit.measure.environment import Environment
from kernelkit.measure.measurement import Measurement
from kernelkit.measure.samplers import MeasureError
from kernelkit.measure.stats import median_rse, quantile

DEFAULT_BUDGET = 10.0  # seconds of wall clock per contender on a GPU, at most
DEFAULT_CPU_BUDGET = 0.3  # on the CPU: the interpreter and simulator are slow, and CPU timings only teach
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
PROBE_BELOW = 10e-3  # cold and hot medians under this get a kernel-time probe (the launch-bound check)
PROBE_CALLS = 20
PROBE_SECONDS = 0.2  # fewer probe calls for slow calls: at least 3, about this long in all


def default_budget(device: str) -> float:
    """The budget when none is given: DEFAULT_BUDGET on a GPU, DEFAULT_CPU_BUDGET on the CPU."""
    return DEFAULT_BUDGET if device == "cuda" else DEFAULT_CPU_BUDGET


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
    estimate: float  # seconds per call
    cost: float  # wall seconds one sample costs (eviction, synchronize and tracing included)
    samples: list[float] = field(default_factory=list)
    clocks: list[float] = field(default_factory=list)
    dropped: int = 0
    spent: float = 0.0
    stop_reason: str = ""


@dataclass(frozen=True)
class Settings:
    """The stopping rule and budget; defaults are the engine's. ``graph_warm``: graph mode without rotation."""

    mode: str = "cold"
    budget: float = DEFAULT_BUDGET
    rse_target: float = DEFAULT_RSE
    min_samples: int = MIN_SAMPLES
    min_time: float = MIN_TIME
    max_samples: int = MAX_SAMPLES
    launch_check: bool = True
    graph_warm: bool = False
    calibrate: bool = True  # % of the device's calibrated ceilings (False: --no-calibrate, no ceilings at all)

    def __post_init__(self) -> None:
        modes.get(self.mode)  # MeasureError naming the modes for an unknown one
        if self.budget <= 0 or self.rse_target <= 0 or self.min_samples < 1:
            raise MeasureError("budget and rse target must be positive, min samples at least 1")


def bench(
    fn: Callable[..., Any],
    *args: Any,
    mode: str = "cold",
    bytes: int | None = None,  # noqa: A002 - the cost model's word
    flops: int | None = None,
    budget: float | None = None,
    rse_target: float = DEFAULT_RSE,
    label: str = "",
    device: str | None = None,
    graph_warm: bool = False,
) -> Measurement:
    """Time ``fn(*args)`` and return a Measurement (seconds per call, with statistics and how it stopped).

    mode: cold (cache evicted before every sample; default), hot (back-to-back calls), graph (CUDA-graph replay,
    rotating copies of the tensor arguments so it is cold too; ``graph_warm`` reuses them) or kernel (the
    device time of each call's kernels). budget: seconds per contender (default 10 on a GPU, 0.3 on the CPU).
    device: 'cuda' or 'cpu'; by default where the tensor arguments are, and for a callable with no tensor
    arguments the GPU when one is visible (CPU timings are CPU work timed with perf_counter_ns, never GPU
    performance).
    """
    dev = device or _device_of(args)
    # functools.partial, not a lambda: the call the samplers loop over is the user's function with its arguments
    # bound, no Python frame of ours around it (hot mode's loop adds ~20 ns a call to a bare loop, not ~40)
    contender = Contender(label or getattr(fn, "__name__", "call"), functools.partial(fn, *args), bytes, flops,
                          args=tuple(args), make_call=lambda copies: functools.partial(fn, *copies))
    spend = default_budget(dev) if budget is None else budget
    settings = Settings(mode=mode, budget=spend, rse_target=rse_target, graph_warm=graph_warm)
    (result,) = bench_many([contender], settings, device=dev)
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
    env = Environment.open(device, settings.mode, settings.graph_warm)
    try:
        states: list[_State | MeasureFailure] = [_guarded(c.label, _start, c, settings, env) for c in contenders]
        active = [s for s in states if isinstance(s, _State)]
        while active:
            for state in list(active):
                failure = _guarded(state.contender.label, _take_batch, state, env, settings)
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


def _device_of(args: Sequence[Any]) -> str:
    """Where the tensor arguments live; with none (a closure), the GPU when there is one."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if tensors:
        return "cuda" if any(t.is_cuda for t in tensors) else "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _start(contender: Contender, settings: Settings, env: Environment) -> _State:
    """First call timed alone, then warm-up; returns the contender's state ready for sampling."""
    if env.device == "cpu" and env.mode.needs_gpu:
        raise MeasureError(f"mode {settings.mode!r} needs a CUDA GPU (none here); on the CPU use --mode "
                           f"{' or '.join(modes.names('cpu'))}")
    plain = env.warmup_sampler(contender.fn)
    first = contender.first_call if contender.first_call is not None else first_call(contender.fn, env.device)
    limit = min(WARMUP_MAX_SECONDS, settings.budget / 2)
    warm: list[float] = []
    if env.device == "cpu" and first > limit:
        # A CPU call slower than the whole warm-up (an interpreted or simulated kernel) has no JIT or clock to
        # wait for: its first call stands as the warm-up. A GPU always warms up: graph and hot mode size from it.
        estimate, calls = first, 0
    else:
        began = bound.perf_counter()
        while len(warm) < WARMUP_MAX_CALLS and bound.perf_counter() - began < limit:
            warm.append(plain.one())
            if len(warm) >= 3 and _agree(warm[-3:]):
                break
        estimate, calls = quantile(sorted(warm[-3:]), 0.5), len(warm)
    sampler = env.sampler(contender, estimate)
    return _State(contender, sampler, first, calls, estimate, env.mode.first_cost(env, sampler, estimate))


def first_call(fn: Callable[[], Any], device: str) -> float:
    """Seconds of one call made alone, synchronized on both sides: a first call's compile, autotune and load."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = bound.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return bound.perf_counter() - start


def _agree(values: Sequence[float]) -> bool:
    mid = quantile(sorted(values), 0.5)
    return mid > 0 and all(abs(v - mid) <= WARMUP_AGREE * mid for v in values)


def batch_size(cost: float, remaining: float = math.inf) -> int:
    """Samples per batch: about BATCH_SECONDS of wall clock at ``cost`` seconds a sample, between 1 and
    MAX_BATCH, and no more than the ``remaining`` budget pays for (at least one)."""
    if cost <= 0:
        return MAX_BATCH
    k = max(1, min(MAX_BATCH, int(BATCH_SECONDS / cost)))
    return max(1, min(k, int(remaining / cost))) if math.isfinite(remaining) else k


def _take_batch(state: _State, env: Environment, settings: Settings) -> None:
    remaining = max(settings.budget - state.spent, 0.0)
    began = bound.perf_counter()
    taken = state.sampler.batch(batch_size(state.cost, remaining), began + remaining)
    wall = bound.perf_counter() - began
    for seconds, mhz in taken:
        if mhz is not None and env.max_clock and not _clock_ok(mhz, env.max_clock):
            state.dropped += 1
            continue
        state.samples.append(seconds)
        if mhz is not None and not math.isnan(mhz):
            state.clocks.append(mhz)
    state.spent += wall
    if taken:
        # A sampler with a fixed cost per batch (kernel mode's tracing session) reports its cost per sample.
        state.cost = getattr(state.sampler, "last_cost", None) or wall / len(taken)
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


def _finish(state: _State, settings: Settings, env: Environment) -> Measurement:
    c = state.contender
    samples = state.samples
    if not samples:
        raise MeasureError(
            f"{c.label}: every one of {state.dropped} samples ran under 75% of the maximum SM clock "
            f"({env.max_clock:g} MHz); the GPU is throttling (power, thermal) or shared. Try again when it is idle"
        )
    warnings = [*env.notes(), *getattr(state.sampler, "warnings", [])]
    m = Measurement(
        label=c.label, mode=settings.mode, device=env.device, device_name=env.device_name, samples=samples,
        first_call=state.first_call, warmup_calls=state.warmup_calls, stop_reason=state.stop_reason,
        calls_per_sample=state.sampler.calls_per_sample, dropped=state.dropped, clocks_mhz=state.clocks,
        max_clock_mhz=env.max_clock, bytes=c.bytes, flops=c.flops, warnings=warnings,
        method=getattr(state.sampler, "method", ""),
        threads=torch.get_num_threads() if env.device == "cpu" else None,
    )
    if state.dropped:
        warnings.append(f"{state.dropped} samples dropped: taken under 75% of the maximum SM clock")
    if m.stats.noisy:
        warnings.append(f"noisy: IQR is {m.stats.iqr_rel:.0%} of the median")
    if env.mode.device_time:
        m.kernel_seconds = m.median
    return m


def _launch_check(states: Sequence[_State | MeasureFailure], results: list[Any], settings: Settings,
                  env: Environment) -> None:
    """Event-timed results under PROBE_BELOW get their kernel time and, when far below, a launch-bound warning."""
    if env.device != "cuda" or not env.mode.probes_launches or not settings.launch_check:
        return
    picked = [i for i, m in enumerate(results) if isinstance(m, Measurement) and m.median < PROBE_BELOW]
    if not picked:
        return
    fns = [states[i].contender.fn for i in picked]  # type: ignore[union-attr]
    calls = [probe_calls(results[i].median) for i in picked]
    for i, kernel in zip(picked, env.kernel_times(fns, calls), strict=True):
        m = results[i]
        m.kernel_seconds = kernel
        warning = launch_bound_warning(m.median, kernel)
        if warning:
            m.warnings.append(warning)


def probe_calls(seconds: float) -> int:
    """Calls of the kernel-time probe: PROBE_CALLS, fewer for slow calls (about PROBE_SECONDS), at least 3."""
    if seconds <= 0:
        return PROBE_CALLS
    return max(3, min(PROBE_CALLS, int(PROBE_SECONDS / seconds)))


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
