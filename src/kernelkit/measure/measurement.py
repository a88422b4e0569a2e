"""Plain-data results of timing: one Measurement per timed callable, one BenchResult per benchmarked case.

Both round-trip through JSON (``to_dict`` / ``from_dict``): the results store, the JSON/CSV exports and the
worker processes all pass them as plain dicts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelkit import wire
from kernelkit.measure.stats import Ratio, Stats, summarize
from kernelkit.results import Status

SUSPECT_PCT = 105.0  # above this % of a measured ceiling the kernel skipped work or the cost model is wrong


@wire.register
@dataclass
class Ceiling:
    """A result's rates against the device's measured ceilings (see measure.ceilings.calibrate)."""

    bandwidth_gbps: float | None = None  # the calibrated device copy bandwidth (read + write)
    tflops: float | None = None  # the calibrated dense-matmul rate for the case's dtype
    flops_kind: str = ""  # which matmul rate: "bf16", "fp32", ...
    pct_bandwidth: float | None = None
    pct_flops: float | None = None

    @property
    def suspect(self) -> bool:
        return any(p is not None and p > SUSPECT_PCT for p in (self.pct_bandwidth, self.pct_flops))


@wire.register
@dataclass
class Measurement:
    """Timing samples of one callable, in seconds per call, and how they were taken.

    ``samples`` are the kept samples (those taken below the clock floor are dropped and counted in
    ``dropped``); ``clocks_mhz`` holds the SM clock read with each kept sample where NVML is available.
    """

    label: str
    mode: str
    device: str  # "cuda" or "cpu": CPU figures are CPU timings, never GPU performance
    device_name: str
    samples: list[float]
    first_call: float  # the first call, timed alone: JIT compile, autotune, module load
    warmup_calls: int
    stop_reason: str  # "converged" (rse under target) | "budget" | "max_samples"
    calls_per_sample: int = 1  # hot and graph mode: calls timed together; a sample is their mean per call
    dropped: int = 0
    clocks_mhz: list[float] = field(default_factory=list)
    max_clock_mhz: float | None = None
    bytes: int | None = None
    flops: int | None = None
    ceiling: Ceiling | None = None
    kernel_seconds: float | None = None  # median device time of the kernels one call launched, when known
    warnings: list[str] = field(default_factory=list)
    method: str = ""  # how each sample was taken, in words (the mode's details: eviction, calls, copies, source)
    # Device memory one call allocated at its peak, above what was allocated before it (measure.memory); None where
    # it was not measured (the CPU).
    peak_bytes: int | None = None
    threads: int | None = None  # torch's threads while it was timed, on the CPU (None on a GPU)

    @property
    def stats(self) -> Stats:
        return summarize(self.samples)

    @property
    def median(self) -> float:
        return self.stats.median

    @property
    def gbps(self) -> float | None:
        """Achieved bandwidth from the cost model at the median, in GB/s (1e9 bytes per second)."""
        return self.bytes / self.median / 1e9 if self.bytes else None

    @property
    def tflops(self) -> float | None:
        return self.flops / self.median / 1e12 if self.flops else None

    @property
    def clock_scaling(self) -> float | None:
        """Median SM clock over the maximum SM clock, when clocks were read."""
        if not self.clocks_mhz or not self.max_clock_mhz:
            return None
        return summarize(self.clocks_mhz).median / self.max_clock_mhz

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stats"] = self.stats.to_dict()
        data["gbps"], data["tflops"], data["clock_scaling"] = self.gbps, self.tflops, self.clock_scaling
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if fields.get("ceiling") is not None:
            fields["ceiling"] = Ceiling(**fields["ceiling"])
        return cls(**fields)


@wire.register
@dataclass
class BenchResult:
    """One benchmarked case: an impl or a baseline of an op at one size and dtype, and what timing it gave.

    ``status`` is the correctness gate's verdict (only PASSED cases are timed) or why timing failed;
    ``speedups`` maps each baseline's name to baseline/this (> 1: this is faster), with a confidence interval;
    ``warnings`` holds what the worker that timed it warned about (Python warnings, kernelkit's own notices such
    as a failed calibration), apart from the measurement's own warnings.
    """

    op: str
    impl: str
    backend: str
    size: tuple[int, ...]
    dtype: str
    device: str
    mode: str
    status: Status
    role: str = "impl"  # "impl" or "baseline"
    message: str = ""
    measurement: Measurement | None = None
    speedups: dict[str, Ratio] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    gpu: int | None = None  # the GPU that ran it, in a run spread over several (--gpus, --ray); else None

    @property
    def case_id(self) -> str:
        """'square/triton_flat/4096x4096/float32': the key that matches a case across runs (with the mode)."""
        return f"{self.op}/{self.impl}/{'x'.join(map(str, self.size))}/{self.dtype}"

    @property
    def suspect(self) -> bool:
        m = self.measurement
        return bool(m and m.ceiling and m.ceiling.suspect)

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case_id,
            "op": self.op,
            "impl": self.impl,
            "backend": self.backend,
            "size": list(self.size),
            "dtype": self.dtype,
            "device": self.device,
            "mode": self.mode,
            "status": self.status.value,
            "role": self.role,
            "message": self.message,
            "suspect": self.suspect,
            "measurement": self.measurement.to_dict() if self.measurement else None,
            "speedups": {name: r.to_dict() for name, r in self.speedups.items()},
            "details": self.details,
            "warnings": list(self.warnings),
            "gpu": self.gpu,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchResult:
        m = data.get("measurement")
        return cls(
            op=data["op"],
            impl=data["impl"],
            backend=data["backend"],
            size=tuple(data["size"]),
            dtype=data["dtype"],
            device=data["device"],
            mode=data["mode"],
            status=Status(data["status"]),
            role=data.get("role", "impl"),
            message=data.get("message", ""),
            measurement=Measurement.from_dict(m) if m else None,
            speedups={k: Ratio(v["value"], v["low"], v["high"], v.get("confidence", 0.95))
                      for k, v in data.get("speedups", {}).items()},
            details=data.get("details", {}),
            warnings=list(data.get("warnings", [])),
            gpu=data.get("gpu"),
        )


# ---- the bench document: `kernelkit bench --json`, the recovery file of a run the store could not keep --------

SCHEMA = "kernelkit.bench/1"


def bench_document(results: Sequence[BenchResult], *, env: dict[str, Any] | None = None, command: str = "") -> str:
    """``{schema, command, env, results: [BenchResult.to_dict()]}`` as strict JSON text (non-finite floats, such as
    the undefined standard error of 2 samples, as null), with a final newline."""
    doc = {"schema": SCHEMA, "command": command, "env": env or {}, "results": [r.to_dict() for r in results]}
    return json.dumps(_finite(doc), indent=1, allow_nan=False, default=str) + "\n"


def read_bench_document(path: str | Path) -> tuple[list[BenchResult], dict[str, Any]]:
    """The results of a bench document file, and the document itself (for its env and command)."""
    doc = json.loads(Path(path).read_text())
    return [BenchResult.from_dict(r) for r in doc.get("results", [])], doc


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None, recursively through dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
