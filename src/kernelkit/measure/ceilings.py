"""The ceilings of the device a measurement ran on (its host fingerprint is in host.py).

Ceilings are measured here, not copied from data sheets: the device-to-device copy bandwidth (read + write) and the
dense-matmul rate of each dtype, each timed by the timing engine in hot mode. Measuring takes ~15 s on a GPU, so
the result is cached on disk per GPU, driver and torch version (``calibrate``). Nothing here changes a clock or a
setting, except torch's TF32 flag around the fp32/tf32 matmuls, which is restored.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from kernelkit.cache import cache_dir, write_atomic
from kernelkit.errors import BackendUnavailable, KernelkitError
from kernelkit.measure.clocks import ClockReader
from kernelkit.measure.host import cpu_model, cpu_threads, device_name, driver_version_without_nvml, l2_bytes
from kernelkit.measure.limits import Ceilings, ceiling_for, worst_spread  # noqa: F401 - the names callers know
from kernelkit.measure.measurement import Measurement
from kernelkit.spec import MATMUL_KINDS  # what an op's compute_dtype may name

Bench = Callable[..., Measurement]  # the signature of kernelkit.measure.timer.bench

# A ceiling whose timing spread (IQR / median) is over this was taken on a busy machine or moving clocks: it is
# measured again (MEASURE_TRIES in all), then refused; a cached one is measured again.
MAX_SPREAD = 0.10
MEASURE_TRIES = 3
# A refusal is remembered this long (a file beside the cache), so the workers of a sweep on a busy machine do not
# each spend MEASURE_TRIES calibrations finding the same; calibrate(force=True) measures anyway.
REFUSAL_SECONDS = 600.0

GPU_COPY_BYTES = 2 << 30  # per buffer: ~40x an H100's 50 MB L2, so hot-mode copies stream from HBM
GPU_MATMUL_N = 8192  # 1.1 TFLOP per call: long enough to reach the steady-state clock, short enough to repeat
CPU_COPY_BYTES = 256 << 20  # 8x a 32 MiB L3
CPU_MATMUL_N = 2048
MATMUL_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def cache_key(device: torch.device | str = "cuda") -> str:
    """The name ceilings of ``device`` are cached under.

    GPU: '<gpu name>_driver-<driver>_torch-<torch>', e.g. 'NVIDIA-H100-80GB-HBM3_driver-580.95.05_torch-2.11.0+cu130'.
    CPU: 'CPU-<model>-<n>threads_torch-<torch>' (torch's thread count sets the CPU matmul rate).
    Characters other than letters, digits, '.', '+' and '-' become '-'.
    """
    return _identity(_resolve(device))[1]


def load_cached(device: torch.device | str = "cuda") -> Ceilings | None:
    """The cached ceilings of ``device``, without measuring; None when there are none (or no such device here)."""
    try:
        dev = _resolve(device)
    except BackendUnavailable:
        return None
    key = _identity(dev)[1]
    return _read_cache(_cache_path(key), key)


def calibrate(device: torch.device | str = "cuda", *, force: bool = False, budget: float = 2.0,
              bench: Bench | None = None) -> Ceilings:
    """The device's measured ceilings, read from the disk cache when present (``force``: measure again).

    GPU: copy over two 2 GiB buffers, then 8192^3 matmuls in fp32 (TF32 off), tf32, bf16, fp16 and fp8 (sm_89+,
    torch._scaled_mm), each timed hot for up to ``budget`` seconds. CPU: copy over 256 MiB and an fp32 2048^3
    matmul. ``bench`` replaces kernelkit.measure.timer.bench (tests pass a fake; None: the real timer).
    A cache file that cannot be read is measured again and overwritten. A measurement whose spread is over
    MAX_SPREAD is taken again, up to MEASURE_TRIES times, then refused (NoisyCalibration, nothing cached); a cached
    one that noisy is measured again. A cached result comes back with ``cached`` set.
    """
    dev = _resolve(device)
    # CPU ceilings are measured with the threads of the CPU workers that use them (--threads), not this process's.
    with _threads(cpu_threads() if dev.type == "cpu" else None):
        return _calibrate(dev, force, budget, bench)


def _calibrate(dev: torch.device, force: bool, budget: float, bench: Bench | None) -> Ceilings:
    device_name, key = _identity(dev)
    path = _cache_path(key)
    refusal = path.with_suffix(".refused")
    if not force:
        cached = _read_cache(path, key)
        if cached is not None and cached.worst_spread()[1] <= MAX_SPREAD:
            cached.cached = True
            return cached
        _raise_recent_refusal(refusal)
    bench = bench or _timer_bench()
    measure = _measure_gpu if dev.type == "cuda" else _measure_cpu
    for _ in range(MEASURE_TRIES):
        copy_gbps, tflops, notes = measure(dev, bench, budget)
        which, spread = worst_spread(notes)
        if spread <= MAX_SPREAD:
            break
    else:
        reason = (f"calibration refused: the {which} ceiling's timings spread over {spread:.0%} of their median (at "
                  f"most {MAX_SPREAD:.0%} is kept) in each of {MEASURE_TRIES} tries (busy machine or moving clocks)")
        write_atomic(refusal, reason.encode())
        raise NoisyCalibration(reason)
    refusal.unlink(missing_ok=True)
    measured_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    ceilings = Ceilings(device_name, key, copy_gbps, tflops, notes, measured_at, dev.type)
    write_atomic(path, json.dumps(ceilings.to_dict(), indent=2).encode())
    return ceilings


@contextlib.contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` for the block (None: as they are)."""
    saved = torch.get_num_threads()
    if count is None or count == saved:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


class NoisyCalibration(KernelkitError):
    """The ceilings' timings spread too widely to be kept (see MAX_SPREAD)."""


def _raise_recent_refusal(refusal: Path) -> None:
    """NoisyCalibration again when a calibration was refused less than REFUSAL_SECONDS ago. The message is the same
    for every worker that reads it (when, not how long ago), so a run reports it once."""
    when = _refused_at(refusal)
    if when is not None:
        raise NoisyCalibration(f"calibration refused at {when} (its timings were too noisy; `kernelkit calibrate "
                               "--force` measures again, --no-calibrate leaves % of ceiling out quietly)")


def _refused_at(refusal: Path) -> str | None:
    """'17:40 UTC' when a calibration was refused less than REFUSAL_SECONDS ago; else None."""
    try:
        stamp = refusal.stat().st_mtime
    except OSError:
        return None
    if not 0 <= time.time() - stamp < REFUSAL_SECONDS:
        return None
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def refused(device: torch.device | str = "cuda") -> str | None:
    """'refused (noisy, 2026-11-26 17:40 UTC)' when the last calibration of ``device`` was refused recently."""
    try:
        key = _identity(_resolve(device))[1]
    except BackendUnavailable:
        return None
    when = _refused_at(_cache_path(key).with_suffix(".refused"))
    return f"refused (noisy, {when})" if when else None


def _timer_bench() -> Bench:
    from kernelkit.measure import timer  # imported late: the timer imports more, and tests replace timer.bench

    return timer.bench


def _resolve(device: torch.device | str) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BackendUnavailable("no CUDA device here; calibrate('cpu') measures the CPU's ceilings instead")
        return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())
    if dev.type != "cpu":
        raise BackendUnavailable(f"ceilings are measured for 'cuda' and 'cpu' devices, not {dev.type!r}")
    return dev


def _identity(dev: torch.device) -> tuple[str, str]:
    """(device name, cache key) of a resolved device."""
    name = device_name(dev)
    if dev.type == "cpu":
        # The threads of the CPU workers that use them (calibrate measures with those), not this process's.
        return name, f"CPU-{_slug(cpu_model())}-{cpu_threads()}threads_torch-{_slug(torch.__version__)}"
    reader = ClockReader.open(dev.index or 0)
    driver = None
    if reader is not None:
        with reader:
            driver = reader.driver_version()
    driver = driver or driver_version_without_nvml() or "unknown"
    return name, f"{_slug(name)}_driver-{_slug(driver)}_torch-{_slug(torch.__version__)}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "unknown"


def _cache_path(key: str) -> Path:
    return cache_dir("ceilings") / f"{key}.json"


def _read_cache(path: Path, key: str) -> Ceilings | None:
    try:
        ceilings = Ceilings.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # missing, corrupt or older: measure again
        return None
    return ceilings if ceilings.key == key else None


# --- measuring ---------------------------------------------------------------------------------------------------


def _measure_gpu(dev: torch.device, bench: Bench, budget: float) -> tuple[float, dict[str, float], dict[str, Any]]:
    nbytes, shortage = _gpu_copy_bytes(dev)
    copy_gbps, copy_note = _copy_rate(dev, nbytes, bench, budget)
    if shortage:
        copy_note["shortage"] = shortage
    notes: dict[str, Any] = {"copy": copy_note}
    tflops: dict[str, float] = {}
    torch.cuda.empty_cache()  # hand the copy buffers back before the matmuls
    for kind in MATMUL_KINDS:
        reason = _fp8_unsupported(dev) if kind == "fp8" else None
        if reason is None:
            try:
                tflops[kind], notes[kind] = _matmul_rate(kind, dev, GPU_MATMUL_N, bench, budget)
            except RuntimeError as exc:
                if kind != "fp8":
                    raise
                reason = f"torch._scaled_mm failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        if reason is not None:
            notes[kind] = {"skipped": reason}
    torch.cuda.empty_cache()
    return copy_gbps, tflops, notes


def _measure_cpu(dev: torch.device, bench: Bench, budget: float) -> tuple[float, dict[str, float], dict[str, Any]]:
    copy_gbps, copy_note = _copy_rate(dev, CPU_COPY_BYTES, bench, budget)
    llc = l2_bytes(dev)
    if CPU_COPY_BYTES < 8 * llc:  # a server's L3 can be hundreds of MiB: say so rather than copy gigabytes
        copy_note["shortage"] = (f"buffers of {CPU_COPY_BYTES >> 20} MiB are {CPU_COPY_BYTES / llc:.1f}x the "
                                 f"{llc >> 20} MiB last-level cache, so the copy rate may include cache hits")
    fp32, fp32_note = _matmul_rate("fp32", dev, CPU_MATMUL_N, bench, budget)
    copy_note["threads"] = fp32_note["threads"] = torch.get_num_threads()
    notes: dict[str, Any] = {"copy": copy_note, "fp32": fp32_note}
    for kind in MATMUL_KINDS[1:]:
        notes[kind] = {"skipped": "CPU: only the fp32 matmul rate is calibrated"}
    return copy_gbps, {"fp32": fp32}, notes


def _gpu_copy_bytes(dev: torch.device) -> tuple[int, str]:
    """(bytes per copy buffer, why it is below GPU_COPY_BYTES or ''): two buffers within 80% of free memory."""
    free, _total = torch.cuda.mem_get_info(dev)
    fits = int(free * 0.8) // 2 >> 20 << 20  # whole MiB
    if fits >= GPU_COPY_BYTES:
        return GPU_COPY_BYTES, ""
    if fits <= 0:
        raise BackendUnavailable(f"only {free >> 20} MiB of GPU memory free: too little to measure copy bandwidth")
    why = f"only {free / 2**30:.1f} GiB free: buffers of {fits / 2**30:.2f} GiB instead of {GPU_COPY_BYTES >> 30} GiB"
    l2 = l2_bytes(dev)
    if fits < 8 * l2:
        why += f"; {fits / l2:.1f}x the L2, so the copy rate may include cache hits"
    return fits, why


def _copy_rate(dev: torch.device, nbytes: int, bench: Bench, budget: float) -> tuple[float, dict[str, Any]]:
    # Filled, not torch.empty: untouched CPU pages all map to the kernel's zero page and read from cache.
    src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    moved = 2 * nbytes  # each call reads src and writes dst
    m = bench(_copy, dst, src, mode="hot", bytes=moved, budget=budget, label="ceiling: copy")
    note = _note(m, what="y.copy_(x)", buffer_bytes=nbytes, bytes_per_call=moved)
    del src, dst
    return moved / m.median / 1e9, note


def _matmul_rate(kind: str, dev: torch.device, n: int, bench: Bench, budget: float) -> tuple[float, dict[str, Any]]:
    fn, args, what = _matmul_call(kind, dev, n)
    flops = 2 * n**3
    tf32 = _tf32_matmul(kind == "tf32") if dev.type == "cuda" and kind in ("fp32", "tf32") else contextlib.nullcontext()
    with tf32:
        m = bench(fn, *args, mode="hot", flops=flops, budget=budget, label=f"ceiling: {kind} matmul")
    return flops / m.median / 1e12, _note(m, what=what, size=f"{n}x{n}x{n}", flops_per_call=flops)


def _matmul_call(kind: str, dev: torch.device, n: int) -> tuple[Callable[..., Any], tuple[Any, ...], str]:
    """(function, its arguments, what it does) for one square matmul of ``kind``; random inputs, as real data."""
    if kind == "fp8":
        a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm requires
        one = torch.ones((), device=dev, dtype=torch.float32)
        return _scaled_mm_bf16, (a, b, one, one), "torch._scaled_mm e4m3 x e4m3 -> bf16, tensor scales, fast accum"
    dtype = MATMUL_DTYPES[kind]
    a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    what = "torch.mm(a, b, out=c)"
    if dev.type == "cuda" and kind in ("fp32", "tf32"):
        what += f", torch.backends.cuda.matmul.allow_tf32={kind == 'tf32'}"
    return _mm, (a, b, torch.empty_like(a)), what


def _fp8_unsupported(dev: torch.device) -> str | None:
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no torch._scaled_mm or float8_e4m3fn"
    major, minor = torch.cuda.get_device_capability(dev)
    if (major, minor) < (8, 9):
        return f"fp8 matmul needs sm_89 or newer; this GPU is sm_{major}{minor}"
    return None


@contextlib.contextmanager
def _tf32_matmul(enabled: bool) -> Iterator[None]:
    """Sets torch's cuBLAS TF32 flag for the block and restores it after."""
    flags = torch.backends.cuda.matmul
    try:
        previous = flags.allow_tf32
    except RuntimeError:
        # The process mixed torch's legacy and new (fp32_precision) TF32 APIs, so the legacy flag cannot be read:
        # use the new one throughout rather than mix them further.
        precision = flags.fp32_precision
        flags.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            flags.fp32_precision = precision
        return
    flags.allow_tf32 = enabled
    try:
        yield
    finally:
        flags.allow_tf32 = previous


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.copy_(src)


def _mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    torch.mm(a, b, out=out)


def _scaled_mm_bf16(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16, use_fast_accum=True)


def _note(m: Measurement, **what: Any) -> dict[str, Any]:
    """How a ceiling was measured: what ran, and the timing's mode, n, median and spread."""
    stats = m.stats
    return {
        **what,
        "mode": m.mode,
        "n": stats.n,
        "median_s": stats.median,
        "p20_s": stats.p20,
        "p80_s": stats.p80,
        "iqr_rel": stats.iqr_rel,
        "stop_reason": m.stop_reason,
        "dropped": m.dropped,
        "clock_scaling": m.clock_scaling,
        "warnings": list(m.warnings),
    }
