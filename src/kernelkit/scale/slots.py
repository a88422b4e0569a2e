"""Where a spread run's workers go: one slot per GPU of this host, each a device index and the environment that
pins its worker to that GPU.

``--gpus all`` takes every visible GPU, ``--gpus 0,2`` those indices, ``--gpus 2`` the first two. Indices are
torch's, as this process sees them; a worker sees only its own GPU (as cuda:0), through CUDA_VISIBLE_DEVICES
(mapped through this process's own CUDA_VISIBLE_DEVICES when it has one). Tests build slots directly: fake
indices with an empty environment run CPU workers side by side.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelkit.errors import SpecError


@dataclass(frozen=True)
class Slot:
    """One worker's place: ``index`` is recorded with every result it gives; ``env`` is set in its worker."""

    index: int
    env: Mapping[str, str] = field(default_factory=dict)


GpuSpec = str | int | Sequence[int] | Sequence[Slot] | None


def gpu_slots(spec: GpuSpec, device: str) -> list[Slot]:
    """The slots ``spec`` names: 'all', '0,1' (indices), 'N' or N (the first N GPUs), a list of indices, or
    Slots (used as they are, on any device). SpecError when it names no GPU or one that is not here."""
    if isinstance(spec, Sequence) and not isinstance(spec, str) and spec and all(isinstance(s, Slot) for s in spec):
        return list(spec)  # type: ignore[arg-type]
    count = _visible_gpus() if device == "cuda" else 0
    if count == 0:
        raise SpecError(f"--gpus {_text(spec)} asked for, but there are no GPUs here (device {device}); "
                        "run without --gpus")
    indices = _indices(spec, count)
    missing = [i for i in indices if not 0 <= i < count]
    if missing:
        raise SpecError(f"--gpus {_text(spec)}: no GPU {', '.join(map(str, missing))} here; "
                        f"this host shows {count} (0 to {count - 1})")
    if len(set(indices)) != len(indices):
        raise SpecError(f"--gpus {_text(spec)} names a GPU twice")
    return [Slot(i, {"CUDA_VISIBLE_DEVICES": _physical(i)}) for i in indices]


def _indices(spec: GpuSpec, count: int) -> list[int]:
    if isinstance(spec, int):
        return list(range(spec)) if spec > 0 else _bad(spec)
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text == "all":
            return list(range(count))
        try:
            if "," in text:
                return [int(part) for part in text.split(",") if part.strip()]
            return _indices(int(text), count)
        except ValueError:
            return _bad(spec)
    if isinstance(spec, Sequence) and spec:
        return [int(i) for i in spec]  # type: ignore[arg-type]
    return _bad(spec)


def _bad(spec: Any) -> list[int]:
    raise SpecError(f"--gpus {_text(spec)}: give 'all', a count such as 2, or indices such as 0,1")


def _text(spec: Any) -> str:
    return spec if isinstance(spec, str) else repr(spec)


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _physical(index: int) -> str:
    """What CUDA_VISIBLE_DEVICES must say for this process's GPU ``index`` (it may itself be a restricted view)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return str(index)
    names = [v.strip() for v in visible.split(",") if v.strip()]
    return names[index] if index < len(names) else str(index)


def fingerprints(slots: Sequence[Slot], device: str, user_file: str | None) -> dict[str, Any]:
    """Each slot's environment fingerprint by index ('0': {...}), read here: GPU, clocks, driver per device."""
    from kernelkit.measure.host import fingerprint

    out: dict[str, Any] = {}
    for slot in slots:
        if device == "cuda":
            import torch

            with torch.cuda.device(slot.index):
                info = fingerprint(user_file)
        else:
            info = fingerprint(user_file)
        info["worker_env"] = dict(slot.env)
        out[str(slot.index)] = info
    return out
