"""A ``do_bench`` that lets ``@triton.autotune`` run in the interpreter too (see the package's docstring).

Nothing here imports triton at import time: importing it fixes whether its kernels run in the interpreter.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

# triton.testing.do_bench's defaults (3.6 and 3.9): warm-up and measuring budgets in ms.
DEFAULT_WARMUP_MS = 25
DEFAULT_REP_MS = 100


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
    return summarize_times(_wall_clock_ms(fn, warmup, rep, grad_to_none), quantiles, return_mode)


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


def summarize_times(times: list[float], quantiles: Sequence[float] | None, return_mode: str) -> float | list[float]:
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
