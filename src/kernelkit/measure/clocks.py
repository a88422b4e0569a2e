"""Read-only GPU clock readings through NVML (nvidia-ml-py, module ``pynvml``), where it is installed.

Nothing here changes a GPU setting: no clock locking, no power limits, no application clocks. A GPU under load
runs at whatever clock its power and thermal budget allows, so the timer reads the SM clock next to each sample
and drops samples taken well below the maximum (``keep_sample``) instead of pinning the clock.
"""

from __future__ import annotations

import math
from types import ModuleType, TracebackType
from typing import Any

CLOCK_FLOOR = 0.75  # samples taken below this fraction of the max SM clock are dropped: the GPU was not at speed

# NVML's clocks-event ("throttle") reason bits (nvml.h, stable ABI values), in the names kernelkit prints.
THROTTLE_REASONS = {
    0x001: "idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal",
    0x040: "hw_thermal",
    0x080: "hw_power_brake",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}


def keep_sample(clock_mhz: float, max_mhz: float | None) -> bool:
    """True unless the sample was taken below ``CLOCK_FLOOR`` of the max SM clock.

    A missing or unreadable clock (NaN, zero, no max) keeps the sample: no reading is no evidence of a slow clock.
    """
    if not max_mhz or not clock_mhz or math.isnan(clock_mhz) or math.isnan(max_mhz):
        return True
    return clock_mhz >= CLOCK_FLOOR * max_mhz


def reason_names(mask: int) -> list[str]:
    """The names of the reason bits set in an NVML clocks-event mask; unknown bits as 'unknown_0x...'."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown_{unknown:#x}")
    return names


class ClockReader:
    """SM and memory clocks and clocks-event reasons of one GPU, read through NVML.

    Create with ``ClockReader.open(torch_index)``; close with ``close()`` or use it as a context manager.
    A reading that fails after opening (GPU lost, query unsupported) gives NaN, never an exception, so a timing
    loop is never broken by a clock query.
    """

    def __init__(self, nvml: ModuleType, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._max_sm: float | None = None
        self._open = True

    @classmethod
    def open(cls, device_index: int = 0) -> ClockReader | None:
        """A reader for torch's CUDA device ``device_index``; None when pynvml is missing, NVML or the GPU is not."""
        try:
            import pynvml
        except Exception:  # noqa: BLE001 - missing or broken pynvml both mean: no clock readings
            return None
        try:
            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001 - no driver, no libnvidia-ml.so, no permission: no clock readings
            return None
        try:
            return cls(pynvml, _handle_for(pynvml, device_index))
        except Exception:  # noqa: BLE001 - no such GPU: release NVML and report no readings
            _shutdown(pynvml)
            return None

    def sm_clock_mhz(self) -> float:
        """The current SM clock in MHz (NaN when it cannot be read)."""
        return self._read(self._nvml.nvmlDeviceGetClockInfo, self._nvml.NVML_CLOCK_SM)

    def mem_clock_mhz(self) -> float:
        """The current memory clock in MHz (NaN when it cannot be read)."""
        return self._read(self._nvml.nvmlDeviceGetClockInfo, self._nvml.NVML_CLOCK_MEM)

    def max_sm_clock_mhz(self) -> float:
        """The maximum SM clock the GPU can boost to, in MHz (read once; NaN when it cannot be read)."""
        if self._max_sm is None:
            value = self._read(self._nvml.nvmlDeviceGetMaxClockInfo, self._nvml.NVML_CLOCK_SM)
            if math.isnan(value):
                return value
            self._max_sm = value
        return self._max_sm

    def throttle_reasons(self) -> list[str]:
        """Why the clocks are below max now ('sw_power_cap', 'hw_slowdown', 'sw_thermal', 'idle', ...).

        Empty when none is active or the reasons cannot be read.
        """
        # nvidia-ml-py 12+ names it ClocksEventReasons; older releases (and older drivers) only ThrottleReasons.
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            query = getattr(self._nvml, name, None)
            if query is None:
                continue
            try:
                return reason_names(int(query(self._handle)))
            except self._nvml.NVMLError:
                continue
        return []

    def persistence_mode(self) -> bool | None:
        """Whether the driver keeps the GPU initialised with no process using it (None when unreadable)."""
        try:
            return int(self._nvml.nvmlDeviceGetPersistenceMode(self._handle)) == 1  # NVML_FEATURE_ENABLED
        except (self._nvml.NVMLError, AttributeError):
            return None

    def temperature_c(self) -> float:
        """The GPU core temperature in degrees C (NaN when it cannot be read)."""
        return self._read(self._nvml.nvmlDeviceGetTemperature, 0)  # NVML_TEMPERATURE_GPU

    def power_w(self) -> tuple[float, float]:
        """(power draw, enforced power limit) in watts; NaN for what cannot be read."""
        return self._milli("nvmlDeviceGetPowerUsage"), self._milli("nvmlDeviceGetEnforcedPowerLimit")

    def _milli(self, query: str) -> float:
        if not self._open:
            return math.nan
        try:
            return float(getattr(self._nvml, query)(self._handle)) / 1000
        except (self._nvml.NVMLError, AttributeError):
            return math.nan

    def driver_version(self) -> str | None:
        """The NVIDIA driver version ('580.95.05'), or None when it cannot be read."""
        try:
            return str(self._nvml.nvmlSystemGetDriverVersion())
        except self._nvml.NVMLError:
            return None

    def close(self) -> None:
        """Release this reader's hold on NVML (NVML counts its users); closing twice is harmless."""
        if self._open:
            self._open = False
            _shutdown(self._nvml)

    def __enter__(self) -> ClockReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _read(self, query: Any, clock_type: int) -> float:
        if not self._open:
            return math.nan
        try:
            return float(query(self._handle, clock_type))
        except self._nvml.NVMLError:
            return math.nan


def _handle_for(nvml: ModuleType, device_index: int) -> Any:
    """The NVML handle of torch's CUDA device ``device_index``.

    CUDA numbers devices fastest-first and after CUDA_VISIBLE_DEVICES; NVML numbers all GPUs in PCI order. The PCI
    bus id is the same on both sides, so it is used whenever torch reports one; the bare index is the fallback.
    """
    bus_id = pci_bus_id(device_index)
    if bus_id is not None:
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        except nvml.NVMLError:
            pass
    return nvml.nvmlDeviceGetHandleByIndex(device_index)


def pci_bus_id(device_index: int) -> str | None:
    """torch's CUDA device ``device_index`` as an NVML PCI bus id ('00000000:1B:00.0'), or None if unknown."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(device_index)
    except Exception:  # noqa: BLE001 - a CUDA init failure only loses the precise mapping
        return None
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    domain = getattr(props, "pci_domain_id", 0) or 0
    slot = getattr(props, "pci_device_id", 0) or 0
    return f"{domain:08X}:{bus:02X}:{slot:02X}.0"


def _shutdown(nvml: ModuleType) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass
