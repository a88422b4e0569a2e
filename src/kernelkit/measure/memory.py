"""Peak device memory of one call: what an impl needs beyond its inputs (a naive attention's seq x seq scores).

torch's caching allocator counts every tensor it hands out. After ``reset_peak_memory_stats``, the highest count
during one call (``max_memory_allocated``) less the count before it (the inputs, the other contenders' copies, the
previous output) is the memory the call itself needed at its peak: its outputs, temporaries and workspaces taken
from torch. Memory taken outside torch's allocator (a library's own cudaMalloc, a C extension's) is not seen, and
nothing is measured on the CPU: torch's CPU allocator keeps no such count, and tracemalloc sees Python objects, not
tensor storage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

METHOD = "torch.cuda.max_memory_allocated during one call, less torch.cuda.memory_allocated before it"
NOT_MEASURED_ON_CPU = "not measured on the CPU (torch keeps no peak count of CPU tensor memory)"


def peak_bytes(call: Callable[[], Any], device: str) -> int | None:
    """Bytes of device memory ``call`` allocated at its peak, above what was allocated before it; None on the CPU.

    The call's output is kept until the peak is read (it counts), then released.
    """
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    output = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del output
    return max(0, peak - before)

