"""A sticky CUDA error faked on the CPU: an impl that raises torch's message for an illegal memory access, and a
correct impl after it. Each call writes its worker's pid to $KK_PIDS_DIR (as <impl>-<pid>), so a test tells
whether the case after the poisoned one ran in a fresh worker."""

import os
from pathlib import Path

import torch

import kernelkit as kk


@kk.op(sizes=[(8, 8)], cpu_sizes=[(8, 8)], dtypes=[torch.float32])
def sticky(x):
    return x * x


def _record(impl: str) -> None:
    folder = os.environ.get("KK_PIDS_DIR")
    if folder:
        (Path(folder) / f"{impl}-{os.getpid()}").touch()


@sticky.impl("eager_illegal_access")
def illegal_access(x):
    _record("eager_illegal_access")
    raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                       "asynchronously reported at some other API call")


@sticky.impl("eager_after")
def after(x):
    _record("eager_after")
    return x * x
