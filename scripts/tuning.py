"""What the gpu-*-tune scripts share: one callable timed cold three ways (kk.bench, CUDA events around each call
after an L2 flush of our own, triton.testing.do_bench) after a check of its output, and gpu-frontier's
reference check (the checker's rule) loaded from the script beside this one."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EVENT_SAMPLES = 200


def events_cold(fn: Any) -> float:
    """Median seconds of one call, CUDA events around it, L2 flushed (a 512 MiB write) before each."""
    import torch

    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(EVENT_SAMPLES):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def measure(label: str, fn: Any, check: Any, budget: float) -> dict[str, Any]:
    """A row: ``fn``'s output checked (``check(out)`` -> '' when right), then its cold medians in microseconds;
    a failure is the row's status, never raised."""
    import triton.testing

    import kernelkit as kk

    row: dict[str, Any] = {"label": label}
    try:
        wrong = check(fn()) if check is not None else ""
        if wrong:
            return {**row, "status": f"WRONG: {wrong}"}
        m = kk.bench(fn, mode="cold", budget=budget, label=label, device="cuda")
        row.update(status="ok", kk_us=m.median * 1e6, p20_us=m.stats.p20 * 1e6, p80_us=m.stats.p80 * 1e6,
                   n=m.stats.n, events_us=events_cold(fn) * 1e6,
                   triton_us=triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median") * 1e3)
    except Exception as exc:  # noqa: BLE001 - one variant's failure is a row, the others go on
        row["status"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
    return row


def frontier() -> Any:
    """scripts/gpu-frontier as a module (its reference_check)."""
    path = ROOT / "scripts/gpu-frontier"
    loader = importlib.machinery.SourceFileLoader("gpu_frontier", str(path))
    spec = importlib.util.spec_from_loader("gpu_frontier", loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_frontier"] = module  # its dataclasses look their module up there
    loader.exec_module(module)
    return module
