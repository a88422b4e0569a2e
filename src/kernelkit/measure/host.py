"""The environment a measurement ran on: GPU or CPU, driver, versions, clocks, cache size, and the git commit of
the user's file. Read-only; nothing here changes a clock or a setting, and nothing fails: unknown is None."""

from __future__ import annotations

import contextlib
import importlib.metadata
import math
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

import torch

from kernelkit import registry
from kernelkit.measure.clocks import ClockReader

GIT_TIMEOUT_S = 5.0
CPU_CACHE_DEFAULT = 32 << 20  # when /sys does not say: a typical server L3
THREADS_ENV = "KERNELKIT_THREADS"  # torch threads in a CPU worker (--threads N); default CPU_THREADS
# One thread by default, as torch.utils.benchmark.Timer does: on a busy 2-core machine x*x on 256x256 took 21-26 ms
# with torch's 2 threads and 110 us with one (2026-11-26); threads fighting over the cores are noise, not speed.
CPU_THREADS = 1


def cpu_threads() -> int:
    """Torch threads a CPU worker runs with: $KERNELKIT_THREADS (--threads) when a positive integer, else 1."""
    try:
        threads = int(os.environ.get(THREADS_ENV, CPU_THREADS))
    except ValueError:
        return CPU_THREADS
    return threads if threads > 0 else CPU_THREADS


# --- fingerprint -------------------------------------------------------------------------------------------------


def fingerprint(user_file: str | None = None) -> dict[str, Any]:
    """What a measurement ran on and with: device, versions, clocks, and the git state of ``user_file``.

    Never raises: whatever cannot be read is None. CPU-only: ``device_name`` is 'CPU: <model>', ``gpu_count`` 0
    and the other GPU fields None. Package versions (those each backend names) come from installed metadata;
    no kernel DSL is imported.
    """
    cpu = cpu_model()
    info: dict[str, Any] = {
        "device_name": f"CPU: {cpu}",
        "gpu_name": None,
        "gpu_count": 0,
        "compute_capability": None,
        "driver_version": None,
        "cuda_runtime": torch.version.cuda,
        "l2_bytes": None,
        "sm_clock_max_mhz": None,
        "sm_clock_mhz": None,
        "mem_clock_mhz": None,
        "throttle_reasons": None,
        "torch": torch.__version__,
        **{key: _package_version(dist) for key, dist in backend_packages().items()},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
        "cpu": cpu,
        "cpu_threads": cpu_threads(),  # torch threads of CPU workers (a GPU run's CPU side is not limited)
        "user_file": None,
        "git_commit": None,
        "git_dirty": None,
    }
    info.update(_gpu_fingerprint())
    if user_file:
        info["user_file"] = str(Path(user_file).resolve())
        info["git_commit"], info["git_dirty"] = git_state(user_file)
    return info


def backend_packages() -> dict[str, str]:
    """Fingerprint key -> distribution, for every package a backend runs on (triton, numba, cuda-core, ...)."""
    return {key: dist for each in registry.every_backend() for key, dist in each.packages.items()}


def _gpu_fingerprint() -> dict[str, Any]:
    try:
        if not torch.cuda.is_available():
            return {}
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - a broken CUDA setup is described as CPU-only; a fingerprint never raises
        return {}
    info: dict[str, Any] = {
        "device_name": props.name,
        "gpu_name": props.name,
        "gpu_count": count,
        "compute_capability": f"{props.major}.{props.minor}",
        "l2_bytes": getattr(props, "L2_cache_size", None),
    }
    reader = ClockReader.open(index)
    if reader is not None:
        with reader:
            info["sm_clock_max_mhz"] = _finite(reader.max_sm_clock_mhz())
            info["sm_clock_mhz"] = _finite(reader.sm_clock_mhz())
            info["mem_clock_mhz"] = _finite(reader.mem_clock_mhz())
            info["throttle_reasons"] = reader.throttle_reasons()
            info["driver_version"] = reader.driver_version()
    if info.get("driver_version") is None:
        info["driver_version"] = driver_version_without_nvml()
    return info


def git_state(path: str | os.PathLike[str]) -> tuple[str | None, bool | None]:
    """(HEAD commit of the repository holding ``path``, whether ``path`` differs from it or is untracked).

    Each is None when git is missing, times out, or ``path`` is not in a repository.
    """
    file = Path(path).resolve()
    where = str(file if file.is_dir() else file.parent)
    commit = _git(where, "rev-parse", "HEAD")
    status = _git(where, "status", "--porcelain", "--", str(file))
    return commit or None, None if status is None else bool(status)


def _git(where: str, *args: str) -> str | None:
    # No optional locks: a fingerprint must not take index.lock from under the user's own git commands.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}
    try:
        done = subprocess.run(["git", "-C", where, *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                              env=env, errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def device_name(device: torch.device | str) -> str:
    """'NVIDIA H100 80GB HBM3' for a CUDA device, 'CPU: <model>' for the CPU (cheap: no fingerprint)."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU: {cpu_model()}"


def cpu_model() -> str:
    """The CPU's model name ('AMD EPYC 9654 96-Core Processor'), from /proc/cpuinfo where there is one."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def l2_bytes(device: torch.device | str) -> int:
    """The last-level cache a cold-cache timing must evict, in bytes.

    CUDA: the GPU's L2 (device properties). CPU: an estimate, the largest cache level cpu0 reports under
    /sys/devices/system/cpu/cpu0/cache/index*/size (usually the shared L3), else 32 MiB.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    sizes = [size for _, _, size in cpu_caches()]
    return max(sizes, default=CPU_CACHE_DEFAULT) or CPU_CACHE_DEFAULT


def cpu_caches() -> list[tuple[int, str, int]]:
    """(level, type, bytes) of each cache cpu0 reports under /sys ('Data', 'Instruction', 'Unified'); [] where
    there is no such folder. Sizes are per instance: a shared L3 is reported whole."""
    caches = []
    for folder in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        with contextlib.suppress(OSError, ValueError):
            caches.append((int((folder / "level").read_text()), (folder / "type").read_text().strip(),
                           _parse_size((folder / "size").read_text())))
    return caches


def _parse_size(text: str) -> int:
    """'32768K' -> 33554432; sysfs cache sizes carry a K, M or G suffix (binary units) or none."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def driver_version_without_nvml() -> str | None:
    """The kernel module's version from /proc, else the CUDA driver API version torch reports ('cuda-api-13.0')."""
    with contextlib.suppress(OSError):
        found = re.search(r"Kernel Module\s+(\S+)", Path("/proc/driver/nvidia/version").read_text())
        if found:
            return found.group(1)
    get = getattr(torch._C, "_cuda_getDriverVersion", None)
    if get is None:
        return None
    try:
        version = int(get())
    except (RuntimeError, TypeError, ValueError):
        return None
    return f"cuda-api-{version // 1000}.{version % 1000 // 10}" if version else None


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value
