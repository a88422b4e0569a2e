"""The values every case is made of: sizes and dtypes (parsed from the command line's spelling), the tolerance
floor of each dtype, and seeded inputs that are the same on every device."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import torch

from kernelkit.errors import SpecError

# Per-dtype floor of the tolerance: (atol, rtol). An element passes when it is within this floor plus twice
# the reference's own low-precision error (see verify.py). The floors are PyTorch's assert_close defaults.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1.3e-6),
    torch.float16: (1e-5, 1e-3),
    torch.bfloat16: (1e-5, 1.6e-2),
}

DTYPE_NAMES: dict[str, torch.dtype] = {
    "float64": torch.float64, "fp64": torch.float64,
    "float32": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}

Size = tuple[int, ...]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPE_NAMES[name.strip().lower()]
    except KeyError:
        raise SpecError(f"unknown dtype {name!r}; use one of {', '.join(sorted(DTYPE_NAMES))}") from None


def parse_size(text: str) -> Size:
    """'1823x781' -> (1823, 781)."""
    try:
        size = tuple(int(part) for part in text.strip().lower().split("x"))
    except ValueError:
        raise SpecError(f"bad size {text!r}: write dimensions joined by 'x', e.g. 1823x781") from None
    if not size or any(d < 0 for d in size):
        raise SpecError(f"bad size {text!r}: dimensions must be non-negative integers")
    return size


def to_size(size: Size | str | None) -> Size | None:
    """A shape given as '1823x781' or as a sequence of ints; None stays None (the op's default applies)."""
    if size is None:
        return None
    return parse_size(size) if isinstance(size, str) else as_size(size)


def to_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """A dtype given by name ('bf16', 'float32') or as a torch.dtype; None stays None (the op's default applies)."""
    return parse_dtype(dtype) if isinstance(dtype, str) else dtype


_ON_DEVICE: contextvars.ContextVar[bool] = contextvars.ContextVar("kernelkit_draws_on_device", default=False)


@contextlib.contextmanager
def device_draws(on: bool = True) -> Iterator[None]:
    """Inside the block seeded_normal draws on the tensor's own device (a GPU's generator: ~100x faster than the
    CPU's for a 16M-element input, but its values are that device's): for input sets that only need to be the
    same wherever the same device makes them again, such as strict mode's secret sets."""
    token = _ON_DEVICE.set(on)
    try:
        yield
    finally:
        _ON_DEVICE.reset(token)


def drawing_on_device() -> bool:
    return _ON_DEVICE.get()


def seeded_normal(size: Size, dtype: torch.dtype, device: torch.device | str, seed: int) -> torch.Tensor:
    """A standard-normal tensor that depends only on (size, seed): drawn on the CPU, then moved and cast (inside
    ``device_draws``, on a GPU: drawn there, so the same (size, seed, GPU kind) gives the same values)."""
    if _ON_DEVICE.get() and torch.device(device).type == "cuda":
        gen = torch.Generator(device=device).manual_seed(seed)
        return torch.randn(size, generator=gen, dtype=torch.float32, device=device).to(dtype)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(size, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)


def as_size(size: Any) -> Size:
    """A shape given as an int or a sequence of ints; SpecError for anything else or a negative dimension."""
    if isinstance(size, int):
        size = (size,)
    try:
        shape = tuple(int(d) for d in size)
    except TypeError:
        raise SpecError(f"size {size!r} is not a shape; write a tuple of ints such as (1823, 781)") from None
    if any(d < 0 for d in shape):
        raise SpecError(f"size {size!r} has a negative dimension")
    return shape
