"""A limit on the user code that runs in the calling process itself: importing a problem's files to plan its cases,
and strict mode's inputs and references, made where the impl never runs. Everything else runs in a worker, whose
limits the runner keeps (runner.py).

    try:
        with deadline(60):
            reference(*inputs)
    except Expired:
        ...  # TIMEOUT

The limit is a real-time timer (SIGALRM) whose handler raises Expired where the code is, and again every second
until the block ends: Expired is a BaseException, and code that swallows it anyway gets it again. It works in the
main thread of a POSIX process and stops Python code, a sleep or a blocking read included; a native call that never
returns to Python (a spinning CUDA kernel being waited on) is stopped only when it returns. Elsewhere (another
thread, Windows) the block runs unbounded. An outer limit keeps its own time across an inner one.

The build limit (KERNELKIT_BUILD_TIMEOUT) lives here too: loading a problem and building its kernels, in a worker or
here.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

BUILD_TIMEOUT_ENV = "KERNELKIT_BUILD_TIMEOUT"
BUILD_TIMEOUT = 900.0  # loading the op and building its kernels (a cold load_inline build takes a minute)
AGAIN_S = 1.0  # after the first Expired, how often it is raised again while the block goes on


class Expired(BaseException):  # noqa: N818 - a limit, not an error of the code it stops
    """A block ran past its deadline (``seconds``). A BaseException, as KeyboardInterrupt: ``except Exception`` in
    the code it stops does not catch it."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"ran past its limit of {seconds:g} s")
        self.seconds = seconds


def build_timeout() -> float:
    """Seconds for loading an op and building its kernels: $KERNELKIT_BUILD_TIMEOUT, else BUILD_TIMEOUT."""
    try:
        seconds = float(os.environ.get(BUILD_TIMEOUT_ENV, BUILD_TIMEOUT))
    except ValueError:
        return BUILD_TIMEOUT
    return seconds if math.isfinite(seconds) and seconds > 0 else BUILD_TIMEOUT


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Run the block for at most ``seconds``; past them Expired is raised inside it (see the module's text)."""
    if not can_limit() or not seconds > 0:
        yield
        return
    began = time.monotonic()
    outer_left, outer_again = signal.getitimer(signal.ITIMER_REAL)
    outer_handler = signal.getsignal(signal.SIGALRM)

    def fire(signum: int, frame: object) -> None:
        if time.monotonic() - began < seconds and callable(outer_handler):  # the outer limit came first
            outer_handler(signum, frame)
        raise Expired(seconds)

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer_left) if outer_left > 0 else seconds, AGAIN_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_left > 0:  # the outer limit goes on with what it had left (at least a moment, so it still fires)
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - began), 1e-3), outer_again)


def can_limit() -> bool:
    """Whether ``deadline`` can stop code here: a POSIX process's main thread."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
