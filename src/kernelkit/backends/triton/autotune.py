"""What ``@triton.autotune`` chose for an impl's kernels, and how long tuning took: recorded with each case."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping, Sequence
from typing import Any

TIMINGS_SHOWN = 8  # configs whose autotuning timings are reported; more would drown the details

AutotuneState = dict[str, tuple[int, float | None]]  # kernel name -> (tuning keys cached, last tuning's seconds)


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
    return dict(sorted(medians.items(), key=lambda item: item[1])[:TIMINGS_SHOWN])


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
