"""The doctor's checks of the machine itself: CPU and load, GPU, driver, clocks, persistence, ncu, ceilings.

Everything here reads; nothing sets a clock, a power limit, persistence mode or any other setting.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

from kernelkit.doctor.report import Check

# Clocks-event reasons that mean the GPU is being held back now (idle and application clocks are not).
HELD_BACK = {"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake", "board_limit"}
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "asimd", "sve")
BUSY_LOAD = 0.75  # a 1-minute load average above this many runnable tasks per core: timings will be noisy


def cpu_checks(device: str) -> list[Check]:
    """The host CPU (model, cores, caches, vector ISA), its load, and on a CPU-only run how cold mode evicts."""
    from kernelkit.measure import host, samplers

    caches = ", ".join(f"L{level}{'d' if kind == 'Data' else 'i' if kind == 'Instruction' else ''} {_size(size)}"
                       for level, kind, size in host.cpu_caches()) or "unknown (no /sys cache info)"
    flags = _cpu_flags()
    isa = ", ".join(f for f in VECTOR_FLAGS if f in flags) or "unknown"
    cores = os.cpu_count() or 0
    checks = [Check("CPU", "info", f"{host.cpu_model()}, {cores} cores ({torch.get_num_threads()} torch "
                                   f"threads), {platform.machine()}; caches: {caches}; vector ISA: {isa}")]
    load = _load_average()
    if load is not None and cores:
        busy = load > BUSY_LOAD * cores
        checks.append(Check("load", "warn" if busy else "ok",
                            f"1-minute load {load:.1f} on {cores} cores" + (": other work shares the CPU, so CPU "
                            "timings (and the launch path of GPU ones) will be noisy" if busy else "")))
    if device == "cpu":
        llc = host.l2_bytes("cpu")
        read = samplers.eviction_bytes(llc, "cpu")
        note = samplers.eviction_note(llc, "cpu")
        checks.append(Check("cold mode", "warn" if note else "ok",
                            note or f"reads {_size(read)} before each sample: {samplers.FLUSH_FACTOR}x the "
                                    f"{_size(llc)} last-level cache"))
    return checks


def _size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith(("flags", "Features")) and ":" in line:
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def no_gpu_check() -> Check:
    build = "this torch is a CPU build" if torch.version.cuda is None else "no GPU is visible to this CUDA torch"
    return Check("GPU", "skipped", f"{build}: graph and kernel modes, clocks, NVML and ncu need one; the CPU "
                                   "checks and CPU timings below are what can be checked here")


def gpu_checks(index: int, reader: Any) -> list[Check]:
    """The GPU's identity, then what NVML says (``reader``: a measure.clocks.ClockReader, or None)."""
    props = torch.cuda.get_device_properties(index)
    l2 = getattr(props, "L2_cache_size", 0)
    checks = [Check("GPU", "ok", f"{props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
                                 f"{props.total_memory / 2**30:.0f} GiB, L2 {_size(l2)}; torch {torch.__version__}, "
                                 f"CUDA {torch.version.cuda}")]
    return checks + nvml_checks(reader)


def nvml_checks(reader: Any) -> list[Check]:
    """Driver, clocks and throttle reasons, persistence mode: read through NVML, never set."""
    if reader is None:
        return [Check("NVML", "warn", "NVML is not available (pip install nvidia-ml-py): no clock readings, so "
                                      "samples taken while the GPU throttles cannot be dropped")]
    checks = [Check("driver", "ok" if reader.driver_version() else "info",
                    f"NVIDIA driver {reader.driver_version() or 'unknown'}")]
    sm, top, mem = reader.sm_clock_mhz(), reader.max_sm_clock_mhz(), reader.mem_clock_mhz()
    reasons = reader.throttle_reasons()
    held = sorted(set(reasons) & HELD_BACK)
    watts, limit = reader.power_w()
    detail = (f"SM {_mhz(sm)} of {_mhz(top)} MHz, memory {_mhz(mem)} MHz, {_num(reader.temperature_c())} C, "
              f"{_num(watts)} of {_num(limit)} W; clocks-event reasons: {', '.join(reasons) or 'none'}")
    if held:
        detail += f". Held back now ({', '.join(held)}): timings taken now are slower than the GPU can run"
    elif "idle" in reasons:
        detail += " (an idle GPU lowers its clocks; they rise under load, and the timer drops slow samples)"
    checks.append(Check("clocks", "warn" if held else "ok", detail))
    persistent = reader.persistence_mode()
    if persistent is None:
        checks.append(Check("persistence", "info", "persistence mode could not be read"))
    elif persistent:
        checks.append(Check("persistence", "ok", "on: the driver keeps the GPU initialised between processes"))
    else:
        checks.append(Check("persistence", "warn", "off: every new process pays the driver's start-up (up to "
                                                   "seconds) in its first call; an administrator can turn it on "
                                                   "(nvidia-smi -pm 1). kernelkit never changes it"))
    return checks


def _mhz(value: float) -> str:
    return "?" if value != value else f"{value:.0f}"  # NaN: unreadable


def _num(value: float) -> str:
    return "?" if value != value else f"{value:.0f}"


def ceilings_check(device: str) -> Check:
    """The cached ceilings (calibrated once per device, driver and torch); measuring them is `kernelkit calibrate`."""
    from kernelkit.measure.ceilings import load_cached, refused

    ceilings = load_cached(device)
    if ceilings is None and (why := refused(device)):
        return Check("ceilings", "warn", f"{why}: the last calibration's timings were too noisy to keep; `kernelkit "
                                         "calibrate --force` on a quiet machine measures again")
    if ceilings is None:
        return Check("ceilings", "warn", "not calibrated yet: `kernelkit calibrate` measures the copy bandwidth and "
                                         "matmul rates once (~15 s on a GPU) and caches them; until then results "
                                         "carry no % of ceiling")
    rates = ", ".join(f"{kind} matmul {rate:,.0f} TFLOP/s" if rate >= 10 else f"{kind} matmul {rate:,.2f} TFLOP/s"
                      for kind, rate in ceilings.matmul_tflops.items())
    return Check("ceilings", "ok", f"copy {ceilings.copy_gbps:,.0f} GB/s (read + write), {rates}; measured "
                                   f"{ceilings.measured_at or 'at an unknown time'}, cached as {ceilings.key}")
