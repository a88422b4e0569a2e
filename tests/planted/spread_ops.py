"""Small ops for the spread tests (several workers side by side): fast eager impls, and one slow enough that a
worker can be killed while it runs."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch

import kernelkit as kk


@kk.op(sizes=[(64, 64)], cpu_sizes=[(8, 8), (16, 16), (24, 24), (32, 32)], dtypes=[torch.float32],
       bytes=lambda x: 2 * x.numel() * x.element_size())
def twice(x):
    return x * 2


@twice.impl("eager_add")
def twice_add(x):
    """x + x: the same values, another kernel."""
    return x + x


@twice.impl("eager_slow")
def twice_slow(x):
    """Right, but a tenth of a second per call: a case in flight for a kill to land on."""
    time.sleep(0.1)
    return x * 2


@twice.impl("eager_kills_its_ray_task")
def twice_kills_its_ray_task(x):
    """Right, but the first call anywhere (one marker file, named by KERNELKIT_TEST_KILL_MARK, made atomically) kills
    the Ray task process that runs this worker, mid-case: Ray must run that task again."""
    mark = os.environ.get("KERNELKIT_TEST_KILL_MARK")
    parent = os.getppid()
    if mark and b"ray::" in Path(f"/proc/{parent}/cmdline").read_bytes():
        try:
            fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return x * 2
        os.write(fd, str(parent).encode())
        os.close(fd)
        os.kill(parent, signal.SIGKILL)
        time.sleep(5)  # the task is gone; this worker is left to its own end
    return x * 2
