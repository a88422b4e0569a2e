"""A device's measured limits (``Ceilings``: copy bandwidth, dense matmul rates) and where a result stands against
them (``ceiling_for``). ceilings.py measures and caches them; the report and the bench read them here."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelkit.measure.measurement import Ceiling
from kernelkit.spec import MATMUL_KINDS, SPARSE24

CACHE_FORMAT = 1  # bump when Ceilings changes meaning: older cache files are then measured again
DTYPE_KINDS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8"}


@dataclass
class Ceilings:
    """Measured limits of one device: what a kernel's rates are compared with.

    ``copy_gbps`` counts read + write (2 * bytes / time of ``y.copy_(x)``); ``matmul_tflops`` maps 'fp32' (TF32
    off), 'tf32', 'bf16', 'fp16' and 'fp8' to dense square-matmul rates where measured; ``notes`` says how each
    figure was measured (sizes, mode, n, median, spread) or why it was skipped.
    """

    device_name: str
    key: str  # see cache_key
    copy_gbps: float
    matmul_tflops: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    measured_at: str = ""  # ISO 8601, UTC
    device: str = "cuda"  # "cuda" or "cpu": CPU ceilings describe the CPU, never a GPU
    cached: bool = field(default=False, compare=False)  # read from the disk cache, not measured now (not stored)

    def flops_ceiling(self, dtype: str) -> tuple[str, float] | None:
        """(kind, TFLOP/s) of the matmul rate a case of ``dtype`` ('bfloat16', 'torch.float16', ...) compares with;
        ``dtype`` may also name a kind ('tf32', 'fp8': an op's compute_dtype).

        float32 compares with the TF32-off rate, whatever the process's TF32 flag. None when not measured.
        """
        name = str(dtype).removeprefix("torch.")
        kind = name if name in MATMUL_KINDS else DTYPE_KINDS.get(name)
        if kind is None or kind not in self.matmul_tflops:
            return None
        return kind, self.matmul_tflops[kind]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["cached"]
        return {"format": CACHE_FORMAT, **data}

    def worst_spread(self) -> tuple[str, float]:
        """(which, spread) of the measured ceiling with the widest timing spread (IQR / median); ('', 0.0) if none."""
        return worst_spread(self.notes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ceilings:
        """The inverse of to_dict; ValueError, KeyError or TypeError for data of another format or shape."""
        if data.get("format", CACHE_FORMAT) != CACHE_FORMAT:
            raise ValueError(f"ceilings of format {data.get('format')!r}, expected {CACHE_FORMAT}")
        return cls(
            device_name=str(data["device_name"]),
            key=str(data["key"]),
            copy_gbps=float(data["copy_gbps"]),
            matmul_tflops={str(k): float(v) for k, v in data["matmul_tflops"].items()},
            notes=dict(data.get("notes", {})),
            measured_at=str(data.get("measured_at", "")),
            device=str(data.get("device", "cuda")),
        )


def ceiling_for(result_bytes: int | None, result_flops: int | None, seconds: float, dtype: str,
                ceilings: Ceilings, *, compute_dtype: str = "") -> Ceiling:
    """A result's achieved rates as % of the device's ceilings; None where the cost model or a ceiling is missing.

    The FLOPs compare with the matmul rate of ``compute_dtype`` when given (an op's Op.compute_dtype: fp8 operands
    with a bfloat16 output, float32 run on TF32 tensor cores), else with the case dtype's.
    Above 105% the Ceiling is ``suspect``: the kernel skipped work or the cost model overstates it.
    """
    ceiling = Ceiling()
    if not seconds or seconds <= 0 or not math.isfinite(seconds):
        return ceiling
    if result_bytes and ceilings.copy_gbps > 0:
        ceiling.bandwidth_gbps = ceilings.copy_gbps
        ceiling.pct_bandwidth = result_bytes / seconds / 1e9 / ceilings.copy_gbps * 100
    sparse = compute_dtype == SPARSE24
    rate = ceilings.flops_ceiling(dtype if sparse else compute_dtype or dtype) if result_flops else None
    if rate is not None and sparse:
        rate = (f"{rate[0]} 2:4", 2 * rate[1])
    if rate is not None and rate[1] > 0:
        ceiling.flops_kind, ceiling.tflops = rate
        ceiling.pct_flops = result_flops / seconds / 1e12 / rate[1] * 100
    return ceiling


def worst_spread(notes: dict[str, Any]) -> tuple[str, float]:
    """(which, IQR / median) of the measured ceiling in ``notes`` with the widest spread; ('', 0.0) if none."""
    spreads = [(float(note["iqr_rel"]), name) for name, note in notes.items()
               if isinstance(note, dict) and isinstance(note.get("iqr_rel"), (int, float))
               and math.isfinite(note["iqr_rel"])]
    if not spreads:
        return "", 0.0
    spread, name = max(spreads)
    return name, spread
