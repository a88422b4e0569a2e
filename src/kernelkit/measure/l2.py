"""Persisting L2 lines, turned back to normal before each cold sample on a GPU.

Since compute capability 8.0 a process may set part of the L2 aside for persisting accesses
(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)) and mark an address range persisting with an access-policy
window on a stream. Normal reads do not evict persisting lines, so cold mode's eviction read would leave a call's
inputs in the L2 if that call (or anything before it) pinned them there: the sample would time the L2, not memory.
Before each cold sample ``PersistingL2.reset`` clears the timed stream's access-policy window (0 bytes, hit ratio 0)
and turns every persisting line back to normal (cudaCtxResetPersistingL2Cache), so the eviction that follows reaches
them.

cudaCtxResetPersistingL2Cache takes effect when it returns, not in stream order: a call still queued could pin its
lines again after it. So where the set-aside is above 0 or the stream carries a window, the device is synchronized
first (outside the timed window: the eviction read that follows still hides the next launch) and the results say
so. Otherwise a reset is three host calls and nothing waits.

The runtime comes from cuda-python (``cuda.bindings.runtime``) or, without it, libcudart through ctypes; with
neither, nothing is reset and every cold result on a GPU says so. On the CPU, and where no GPU is visible, a reset
does nothing and says nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

LIMIT_PERSISTING_L2 = 6  # cudaLimitPersistingL2CacheSize
ATTRIBUTE_WINDOW = 1  # cudaStreamAttributeAccessPolicyWindow (cudaLaunchAttributeAccessPolicyWindow)
NORMAL, STREAMING, PERSISTING = 0, 1, 2  # cudaAccessProperty
CUDART_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")


class Runtime(Protocol):
    """The four runtime calls a reset needs (and a test's cheat uses to pin lines)."""

    source: str

    def limit(self) -> int: ...  # bytes set aside for persisting lines; 0 when unreadable

    def window_bytes(self, stream: int) -> int: ...  # the stream's access-policy window; 0 when unreadable

    def set_window(self, stream: int, base: int, nbytes: int, hit_ratio: float, hit: int, miss: int) -> int: ...

    def reset_lines(self) -> int: ...


class _Bindings:
    """cuda-python's runtime module; every call answers an error code rather than raising."""

    source = "cuda.bindings.runtime"

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.window = rt.cudaStreamAttrID.cudaLaunchAttributeAccessPolicyWindow
        self.ok = rt.cudaError_t.cudaSuccess

    def limit(self) -> int:
        err, value = self.rt.cudaDeviceGetLimit(self.rt.cudaLimit.cudaLimitPersistingL2CacheSize)
        return int(value) if err == self.ok else 0

    def window_bytes(self, stream: int) -> int:
        err, value = self.rt.cudaStreamGetAttribute(stream, self.window)
        return int(value.accessPolicyWindow.num_bytes) if err == self.ok and value is not None else 0

    def set_window(self, stream: int, base: int, nbytes: int, hit_ratio: float, hit: int, miss: int) -> int:
        value = self.rt.cudaStreamAttrValue()
        window = value.accessPolicyWindow
        window.base_ptr, window.num_bytes, window.hitRatio = base, nbytes, hit_ratio
        window.hitProp, window.missProp = self.rt.cudaAccessProperty(hit), self.rt.cudaAccessProperty(miss)
        (err,) = self.rt.cudaStreamSetAttribute(stream, self.window, value)
        return int(err)

    def reset_lines(self) -> int:
        (err,) = self.rt.cudaCtxResetPersistingL2Cache()
        return int(err)


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _AttrValue(ctypes.Union):  # cudaStreamAttrValue (cudaLaunchAttributeValue): 64 bytes in CUDA 12 and 13
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


class _Ctypes:
    """libcudart through ctypes, for where cuda-python is not installed."""

    source = "libcudart (ctypes)"

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def limit(self) -> int:
        value = ctypes.c_size_t(0)
        return int(value.value) if self.lib.cudaDeviceGetLimit(ctypes.byref(value), LIMIT_PERSISTING_L2) == 0 else 0

    def window_bytes(self, stream: int) -> int:
        value = _AttrValue()
        err = self.lib.cudaStreamGetAttribute(ctypes.c_void_p(stream), ATTRIBUTE_WINDOW, ctypes.byref(value))
        return int(value.accessPolicyWindow.num_bytes) if err == 0 else 0

    def set_window(self, stream: int, base: int, nbytes: int, hit_ratio: float, hit: int, miss: int) -> int:
        value = _AttrValue()
        value.accessPolicyWindow = _Window(base or None, nbytes, hit_ratio, hit, miss)
        return int(self.lib.cudaStreamSetAttribute(ctypes.c_void_p(stream), ATTRIBUTE_WINDOW, ctypes.byref(value)))

    def reset_lines(self) -> int:
        return int(self.lib.cudaCtxResetPersistingL2Cache())


def load_runtime() -> tuple[Runtime | None, str]:
    """The runtime calls from cuda-python, else from libcudart; (None, why) when neither loads."""
    try:
        from cuda.bindings import runtime as rt

        return _Bindings(rt), ""
    except Exception as exc:  # noqa: BLE001 - any import failure: try libcudart
        why = f"cuda.bindings.runtime: {type(exc).__name__}: {exc}"
    for name in CUDART_NAMES:
        try:
            return _Ctypes(ctypes.CDLL(name)), ""
        except OSError:
            continue
    return None, f"{why}; libcudart: none of {', '.join(CUDART_NAMES)} loads"


@dataclass
class PersistingL2:
    """One timing session's resets (measure.environment opens it); ``reset(stream)`` before each cold sample."""

    runtime: Runtime | None
    missing: str = ""  # why no runtime was found, on a GPU ('' elsewhere)
    sync: Callable[[], None] = field(default=lambda: torch.cuda.synchronize(), repr=False)
    waited: int = 0  # samples that waited for the device: a set-aside or a window was found before them
    failed: int = 0  # resets the runtime refused
    set_aside: int = 0  # the largest persisting set-aside seen (bytes), for the note
    window: int = 0  # the largest access-policy window seen on the timed stream (bytes), for the note
    at_open: int = -1  # the set-aside when the session opened (bytes; -1: not read), for the note

    @classmethod
    def open(cls, device: str) -> PersistingL2:
        """A reset that does nothing on the CPU or without a GPU; else the runtime's, or a note why none."""
        if device != "cuda" or not torch.cuda.is_available():
            return cls(None)
        runtime, why = load_runtime()
        return cls(runtime, why, at_open=runtime.limit() if runtime is not None else -1)

    def reset(self, stream: int) -> None:
        """Clear ``stream``'s access-policy window and turn every persisting line back to normal, after waiting for
        the device when lines may be pinned by work still queued."""
        runtime = self.runtime
        if runtime is None:
            return
        window = runtime.window_bytes(stream)
        limit = runtime.limit()
        if window or limit:
            self.sync()
            self.waited += 1
            self.set_aside, self.window = max(self.set_aside, limit), max(self.window, window)
        if window and runtime.set_window(stream, 0, 0, 0.0, NORMAL, NORMAL):
            self.failed += 1
        if runtime.reset_lines():
            self.failed += 1

    def notes(self) -> list[str]:
        """What a cold result on a GPU must say: no reset at all, samples that waited, resets refused."""
        found = []
        if self.missing:
            found.append(f"persisting L2 lines were not reset before cold samples (no CUDA runtime to call: "
                         f"{self.missing}): a call that pins its inputs in the L2 may time faster than memory")
        if self.waited:
            what = [f"a persisting L2 set-aside of {self.set_aside} bytes" if self.set_aside else "",
                    f"an access-policy window of {self.window} bytes on the timed stream" if self.window else ""]
            since = ("" if not self.set_aside or self.at_open < 0 else
                     " (the set-aside was there when this timing session began: set by this process earlier, or "
                     "the device's own setting)" if self.at_open == self.set_aside else
                     f" (the set-aside was {self.at_open} bytes when this timing session began: set while it ran)")
            found.append(f"{' and '.join(w for w in what if w)} found before {self.waited} cold samples: each "
                         f"waited for the device, then its persisting lines were reset{since}")
        if self.failed:
            found.append(f"the CUDA runtime refused {self.failed} persisting L2 resets")
        return found
