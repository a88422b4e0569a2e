"""Device activity from CUPTI's activity API through cupti-python (``from cupti import cupti``), where it imports.

CUPTI records every kernel, memcpy and memset the process runs, whichever API launched it (torch, Triton, CUDA
C++ through cuda.core, Numba), with start and end in CUPTI's own clock, the one ``cupti.get_timestamp()`` reads.
So a call's range is two readings around it (the second after a device synchronize), and the call's device work
is every record that starts inside that range. torch.profiler reads the same records through Kineto, which
misses launches it does not intercept (cuda.core, Numba): kernel_time.py prefers this and falls back to it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

BUFFER_BYTES = 8 << 20  # per activity buffer CUPTI asks for; records are ~100-200 bytes each
Span = tuple[int, int]


class CuptiTracer:
    """Kernel, memcpy and memset records of a list of calls, from one CUPTI activity session per list."""

    source = "CUPTI activity records (cupti-python)"

    def __init__(self, cupti: ModuleType) -> None:
        self._cupti = cupti

    @classmethod
    def open(cls) -> CuptiTracer | None:
        """A tracer when cupti-python imports (it needs a CUDA driver and CUPTI's library); else None."""
        try:
            from cupti import cupti  # type: ignore[import-not-found]
        except Exception:  # noqa: BLE001 - not installed, or its CUPTI library is missing: use torch.profiler
            return None
        return cls(cupti)

    def trace(self, fns: Sequence[Callable[[], Any]], before: Callable[[], None]) -> tuple[list[Span], list[Span]]:
        """(one range per call, every device span), in CUPTI's clock. ``before`` runs ahead of each call's range
        (the eviction, then a synchronize), so its own kernels start outside every range."""
        c = self._cupti
        kinds = {int(c.ActivityKind.CONCURRENT_KERNEL), int(c.ActivityKind.MEMCPY), int(c.ActivityKind.MEMSET)}
        records: list[Span] = []
        lock = threading.Lock()  # CUPTI may deliver buffers from its own thread

        def requested() -> tuple[int, int]:
            return BUFFER_BYTES, 0  # 0: as many records as fit

        def completed(activities: list[Any]) -> None:
            with lock:
                records.extend((int(a.start), int(a.end)) for a in activities if int(a.kind) in kinds)

        # Registered for every session: another CUPTI client (torch.profiler) may have registered its own since.
        c.activity_register_callbacks(requested, completed)
        enabled: list[int] = []
        try:
            for kind in sorted(kinds):
                c.activity_enable(kind)
                enabled.append(kind)
            ranges: list[Span] = []
            for fn in fns:
                before()
                start = int(c.get_timestamp())
                fn()
                torch.cuda.synchronize()
                ranges.append((start, int(c.get_timestamp())))
            c.activity_flush_all(1)  # forced: every buffer is delivered, even one partly filled
        finally:
            for kind in enabled:
                c.activity_disable(kind)
        with lock:
            return ranges, list(records)
