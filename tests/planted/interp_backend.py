"""A backend that is not built in, registered by the file that uses it: ``interp`` impls are plain Python loops.

It proves the Backend interface: a check, a benchmark (in a worker process, which imports this file and so
registers the backend there too) and ``kernelkit asm``'s "cannot show" path, with no change to kernelkit.
"""

from __future__ import annotations

import torch

import kernelkit as kk
from kernelkit import backends


class InterpError(Exception):
    """What the interp "compiler" raises for a kernel it rejects."""


class InterpBackend(backends.Backend):
    name = "interp"
    description = "plain Python loops over the elements (a test backend)"
    no_asm = "impl {impl!r} is plain Python (backend {backend}): there is no machine code to show"

    def ensure_runnable(self, impl, dtype, device):
        if device != "cpu":
            raise kk.BackendUnavailable("interp impls run on the CPU only")

    def is_compile_error(self, exc):
        return isinstance(exc, InterpError)


backends.register(InterpBackend())


@kk.op(sizes=[(64,)], cpu_sizes=[(33,), (4, 5)], dtypes=[torch.float32], bytes=lambda x: 2 * x.numel() * 4)
def triple(x):
    return 3 * x


@triple.impl("interp_loop")
def triple_interp_loop(x):
    """One Python multiplication per element."""
    return torch.tensor([3 * v for v in x.flatten().tolist()], dtype=x.dtype).reshape(x.shape)


@triple.impl("interp_rejected")
def triple_interp_rejected(x):
    """Its kernel does not "compile"."""
    raise InterpError("interp cannot compile this kernel")
