"""Triton: a ``do_bench`` that lets ``@triton.autotune`` run in the interpreter too, and what autotuning chose.

    @triton.autotune(configs=[...], key=["n_elements"], do_bench=kernelkit.backends.triton.do_bench)
    @triton.jit
    def square_flat_kernel(...): ...

Nothing here imports triton at import time: importing it fixes whether its kernels run in the interpreter.
"""

from __future__ import annotations

import inspect
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# triton.testing.do_bench's defaults (3.6 and 3.9): warm-up and measuring budgets in ms.
DEFAULT_WARMUP_MS = 25
DEFAULT_REP_MS = 100
_TIMINGS_SHOWN = 8  # configs whose autotuning timings are reported; more would drown the details

AutotuneState = dict[str, tuple[int, float | None]]  # kernel name -> (tuning keys cached, last tuning's seconds)


def interpreting() -> bool:
    """True when Triton kernels run in its interpreter (TRITON_INTERPRET=1, set for --device cpu)."""
    import triton

    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)  # triton.knobs since 3.4
    if runtime is not None:
        return bool(runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def do_bench(
    fn: Callable[[], Any],
    warmup: float = DEFAULT_WARMUP_MS,
    rep: float = DEFAULT_REP_MS,
    grad_to_none: Sequence[Any] | None = None,
    quantiles: Sequence[float] | None = None,
    return_mode: str = "mean",
) -> float | list[float]:
    """Milliseconds per call of ``fn``: ``triton.testing.do_bench`` on a GPU, a CPU wall clock in the interpreter.

    Same signature and return as ``triton.testing.do_bench`` (checked in 3.6 and 3.9): one float, or a list when
    ``quantiles`` is given (the Autotuner passes quantiles=(0.5, 0.2, 0.8) and keeps the config whose list is
    least). The interpreter has no GPU timer; its times are CPU seconds of interpreting Python, useful only to
    let autotuning run there, never a GPU figure.
    """
    if not interpreting():
        import triton.testing

        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                                       quantiles=quantiles, return_mode=return_mode)
    return _summarize(_wall_clock_ms(fn, warmup, rep, grad_to_none), quantiles, return_mode)


def _wall_clock_ms(
    fn: Callable[[], Any], warmup: float, rep: float, grad_to_none: Sequence[Any] | None
) -> list[float]:
    """Per-call wall times: a first call to estimate, calls for ``warmup`` ms, then timed calls for ``rep`` ms.

    The interpreter runs synchronously, so a call's wall time is its run time. The first call also rewrites the
    kernel's Python: its estimate runs high, which only means fewer calls (one timed call at least).
    """
    start = time.perf_counter()
    fn()
    estimate_ms = max((time.perf_counter() - start) * 1e3, 1e-3)
    for _ in range(int(warmup / estimate_ms)):
        fn()
    times = []
    for _ in range(max(1, int(rep / estimate_ms))):
        for tensor in grad_to_none or ():
            tensor.grad = None
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _summarize(times: list[float], quantiles: Sequence[float] | None, return_mode: str) -> float | list[float]:
    """What triton.testing.do_bench returns for these times (its _summarize_statistics, 3.6 and 3.9)."""
    if quantiles is not None:
        ordered = sorted(times)
        found = [_quantile(ordered, q) for q in quantiles]
        return found[0] if len(found) == 1 else found
    modes: dict[str, Callable[[list[float]], Any]] = {
        "all": list, "min": min, "max": max, "mean": statistics.mean, "median": statistics.median,
    }
    if return_mode not in modes:
        raise ValueError(f"return_mode must be one of {', '.join(modes)}, got {return_mode!r}")
    return modes[return_mode](times)


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks, as torch.quantile does."""
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# ---- what autotuning chose ---------------------------------------------------------------------------------


def autotune_state(kernels: Sequence[Any]) -> AutotuneState:
    """A snapshot to take before a call, so ``autotune_details`` can tell whether that call autotuned."""
    return {name: (len(tuner.cache), getattr(tuner, "bench_time", None)) for name, tuner in _autotuners(kernels)}


def autotune_details(kernels: Sequence[Any], before: Mapping[str, tuple[int, float | None]] | None = None
                     ) -> dict[str, dict[str, Any]]:
    """Per autotuned kernel among ``kernels`` (an impl's ``kernels=[...]``): the config it runs with and the
    autotuning time, apart from any run time. Empty when no kernel is a Triton Autotuner that has run.

    ``kernels`` may hold Triton kernels or the zero-argument ``functools.cache`` builders that make them on
    first use; a builder that has not run is skipped (nothing is built to report on). With ``before`` (from
    ``autotune_state`` taken before the call), ``tuned`` says whether that call autotuned: False means the
    config came from this process's cache of earlier calls. ``tuning_s`` is Triton's ``bench_time`` (wall
    seconds benchmarking every config: compiling, warm-up and timing); None when the call did not benchmark
    (a cached key, a single config, or Triton's on-disk autotuning cache).
    """
    details: dict[str, dict[str, Any]] = {}
    for name, tuner in _autotuners(kernels):
        config = getattr(tuner, "best_config", None)
        if config is None:  # defined, never launched
            continue
        bench_time = getattr(tuner, "bench_time", None)
        entry: dict[str, Any] = {"config": format_config(config)}
        if before is not None:
            keys_before, bench_before = before.get(name, (0, None))
            tuned = len(tuner.cache) > keys_before
            benchmarked = tuned and bench_time is not None and bench_time != bench_before
            entry["tuned"] = tuned
            entry["tuning_s"] = bench_time if benchmarked else None
            if benchmarked:
                entry["timings_ms"] = _timings(tuner)
        else:
            entry["tuning_s"] = bench_time  # the latest tuning in this process, of whichever key
        details[name] = entry
    return details


def format_config(config: Any) -> str:
    """A triton.Config as 'BLOCK_SIZE=1024, num_warps=4, num_stages=3' (num_ctas and maxnreg when set)."""
    parts = [f"{key}={value}" for key, value in getattr(config, "kwargs", {}).items()]
    parts += [f"num_warps={config.num_warps}", f"num_stages={config.num_stages}"]
    if getattr(config, "num_ctas", 1) != 1:
        parts.append(f"num_ctas={config.num_ctas}")
    if getattr(config, "maxnreg", None) is not None:
        parts.append(f"maxnreg={config.maxnreg}")
    return ", ".join(parts)


def _timings(tuner: Any) -> dict[str, float]:
    """Median ms of each config the last tuning tried (inf: it failed to build), fastest first."""
    timings = getattr(tuner, "configs_timings", None) or {}
    medians = {format_config(c): float(t[0] if isinstance(t, (list, tuple)) else t) for c, t in timings.items()}
    return dict(sorted(medians.items(), key=lambda item: item[1])[:_TIMINGS_SHOWN])


def _autotuners(kernels: Sequence[Any]) -> list[tuple[str, Any]]:
    """(kernel name, Autotuner) for each of ``kernels`` that is, or wraps, a Triton Autotuner."""
    autotuner = sys.modules.get("triton.runtime.autotuner")
    if autotuner is None:  # triton never imported here: nothing can have been tuned
        return []
    interface = sys.modules["triton.runtime.jit"].KernelInterface
    found = []
    for item in kernels:
        kernel = _built(item)
        while isinstance(kernel, interface) and not isinstance(kernel, autotuner.Autotuner):
            kernel = getattr(kernel, "fn", None)  # through @triton.heuristics and the like
        if isinstance(kernel, autotuner.Autotuner):
            base = getattr(kernel, "base_fn", None) or kernel.fn
            found.append((getattr(base, "__name__", repr(base)), kernel))
    return found


def _built(item: Any) -> Any:
    """The kernel itself, what a functools.cache builder returned, or what a lazy kernel handle
    (backends.lazy.LazyKernel) points at; None when nothing is built yet."""
    if callable(getattr(item, "built", None)):
        return item.built()
    cache_info = getattr(item, "cache_info", None)
    if cache_info is None or not callable(item):
        return item
    wrapped = getattr(item, "__wrapped__", item)
    if cache_info().currsize == 0 or inspect.signature(wrapped).parameters:
        return None
    return item()
