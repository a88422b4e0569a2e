"""Impls that start processes: a fork that outlives a segfault, a forgotten child, a hang with a child.

Each child writes its pid to $KK_PIDS_DIR so a test can tell whether it was left running.
"""

import os
import signal
import subprocess
import time

import torch

import kernelkit as kk


@kk.op(sizes=[(8, 8)], cpu_sizes=[(8, 8)], dtypes=[torch.float32])
def forked(x):
    return x * x


def _record(pid: int) -> None:
    folder = os.environ.get("KK_PIDS_DIR")
    if folder:
        with open(os.path.join(folder, f"{pid}.pid"), "w") as f:
            f.write(str(pid))


@forked.impl("eager_fork_then_segfault")
def fork_then_segfault(x):
    pid = os.fork()
    if pid == 0:  # the child holds the worker's pipe and sleeps
        time.sleep(300)
        os._exit(0)
    _record(pid)
    os.kill(os.getpid(), signal.SIGSEGV)
    return x * x


@forked.impl("eager_leaves_a_child")
def leaves_a_child(x):
    child = subprocess.Popen(["sleep", "300"])
    _record(child.pid)
    return x * x


@forked.impl("eager_hangs_with_a_child")
def hangs_with_a_child(x):
    child = subprocess.Popen(["sleep", "300"])
    _record(child.pid)
    time.sleep(300)
    return x * x


@forked.impl("eager_correct")
def correct(x):
    return x * x
