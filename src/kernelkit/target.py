"""One case, ready to run in this process: the op, the impl, and fresh inputs (for profile, ncu and asm)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kernelkit import backends, loader, runner
from kernelkit.errors import LoadError
from kernelkit.spec import Impl, Op, Size, dtype_name, to_dtype, to_size


@dataclass
class CaseSetup:
    """An impl of an op at one size and dtype on one device, with its inputs made."""

    op: Op
    impl: Impl
    size: Size
    dtype: torch.dtype
    device: str
    inputs: tuple[Any, ...]
    source: str = ""  # where the op is defined (a module name or a .py path), to load it again in another process

    @property
    def label(self) -> str:
        """'square/triton_flat/4096x4096/float32': names the case in tables, traces and NVTX ranges."""
        return f"{self.op.name}/{self.impl.name}/{'x'.join(map(str, self.size))}/{dtype_name(self.dtype)}"

    def call(self) -> Any:
        """One call of the impl on the case's inputs."""
        return self.impl.fn(*self.inputs)


def prepare_case(
    target: str,
    impl: str,
    *,
    op_name: str | None = None,
    size: Size | str | None = None,
    dtype: torch.dtype | str | None = None,
    device: str | None = None,
    seed: int = 0,
    build: bool = True,
) -> CaseSetup:
    """Load ``target`` (a built-in op name or a .py file), pick the impl, make the inputs of one case.

    size/dtype ('1823x781', 'bf16' or values) default as in ``pick``. ``build`` compiles the impl's CUDA kernels
    and raises BackendUnavailable or CompileError when the impl cannot run here, as a check would report them.
    """
    dev = runner.resolve_device(device)
    backends.prepare_process(dev)  # before the target's file imports triton or numba
    op = loader.find_op(target, op_name)
    chosen, case_size, case_dtype = pick(op, impl, size, dtype, dev)
    if build:
        backends.ensure_runnable(chosen, case_dtype, dev)
    inputs = tuple(op.make_inputs(case_size, case_dtype, torch.device(dev), seed))
    return CaseSetup(op, chosen, case_size, case_dtype, dev, inputs, loader.resolve(target))


def pick(
    op: Op, impl: str, size: Size | str | None, dtype: torch.dtype | str | None, device: str
) -> tuple[Impl, Size, torch.dtype]:
    """The impl named ``impl`` and the case's size and dtype: the given ones, else the op's first size for
    ``device`` and its first dtype that the impl supports. An unknown impl is a LoadError listing the known."""
    try:
        chosen = op.get_impl(impl)
    except KeyError:
        raise LoadError(f"op {op.name!r} has no impl {impl!r}; its impls: {', '.join(op.all_impls())}") from None
    case_size = to_size(size)
    if case_size is None:
        case_size = op.sizes_for(device)[0]
    case_dtype = to_dtype(dtype)
    if case_dtype is None:
        supported = [d for d in op.dtypes if not chosen.dtypes or d in chosen.dtypes]
        case_dtype = (supported or op.dtypes)[0]
    return chosen, case_size, case_dtype
