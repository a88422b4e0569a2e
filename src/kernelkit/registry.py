"""The registry of backends by name: the built-in ones (imported on first use) and those a user's file registers.

It imports nothing of kernelkit's, so the data model (spec.py) can ask which backend names exist and which
baselines an op gets without importing the backends themselves: a backend is loaded by its "module:class" string
when first asked for (``backend``).
"""

from __future__ import annotations

import importlib
from typing import Any

from kernelkit.errors import SpecError

# The built-in backends, by name: "module:class", imported when first asked for. One line per backend.
BUILTIN: dict[str, str] = {
    "eager": "kernelkit.backends.eager:EagerBackend",
    "compile": "kernelkit.backends.compiled:CompileBackend",
    "triton": "kernelkit.backends.triton.backend:TritonBackend",
    "cuda": "kernelkit.backends.cuda.backend:CudaBackend",
    "numba": "kernelkit.backends.numba:NumbaBackend",
}

# What runs a built-in backend's kernels on the CPU in place of a GPU, where something does: a stand-in whose
# timings teach the method and say nothing of speed (``compare`` never calls them faster or slower). A backend
# registered at run time says so with its ``cpu_stand_in`` attribute.
CPU_STAND_INS: dict[str, str] = {"triton": "Triton's interpreter", "numba": "Numba's CUDA simulator"}

_loaded: dict[str, Any] = {}  # Backend instances, by name
_added: dict[str, Any] = {}  # registered at run time, in registration order


def register(backend: Any) -> Any:
    """Add ``backend`` (a backends.Backend) under its name (impls whose name starts with it then belong to it);
    returns it.

    Registering the same name again replaces the earlier one (a user's file may be imported more than once); a
    built-in backend's name cannot be taken.
    """
    if not backend.name or not backend.name.isidentifier() or "_" in backend.name:
        raise SpecError(f"backend name {backend.name!r}: use one word of letters and digits (impl names start with "
                        "it, followed by '_')")
    if backend.name in BUILTIN:
        raise SpecError(f"{backend.name!r} is a built-in backend; give yours another name")
    _added[backend.name] = backend
    return backend


def names() -> tuple[str, ...]:
    """Every backend's name: the built-in ones, then those registered at run time."""
    return (*BUILTIN, *_added)


def backend(name: str) -> Any:
    """The backend (a backends.Backend) called ``name``; SpecError naming the known ones if there is none."""
    if name in _added:
        return _added[name]
    if name not in _loaded:
        if name not in BUILTIN:
            raise SpecError(f"unknown backend {name!r}; use one of {', '.join(names())}")
        module, _, cls = BUILTIN[name].partition(":")
        _loaded[name] = getattr(importlib.import_module(module), cls)()
    return _loaded[name]


def every_backend() -> list[Any]:
    """Every backend, built-in ones first (each imported on first use)."""
    return [backend(name) for name in names()]




def cpu_stand_in(name: str) -> str:
    """What runs backend ``name``'s kernels on the CPU in place of a GPU ("Triton's interpreter"), or "" where its
    CPU timings are real (eager PyTorch, torch.compile) or it does not run there. Imports no backend."""
    if name in _added:
        return str(getattr(_added[name], "cpu_stand_in", "") or "")
    return CPU_STAND_INS.get(name, "")
