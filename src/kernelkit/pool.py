"""Worker processes held outside a run's own ``runner.Worker``: started early, while the driver still opens the
target and plans the run (``started_early``), or parked between the runs of one process (``reuse_workers``).

A worker's start is seconds (torch's import, then triton's and CUDA's), and so is opening a target: a KernelBench
level's hundred problem files, each read on the meta device for its size and cost. Started early, the two overlap.
``runner.Worker`` takes a held worker of its device and environment before it spawns one of its own; one never
taken is killed, with what it started, when its block ends. A spread run's slots take theirs from their own
threads at once, so the lists are changed only under ``_lock``: two slots never get the same worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

from kernelkit import channel, hygiene

Key = tuple[str, tuple[tuple[str, str], ...]]  # (device, the worker's environment, sorted)
Spawn = Callable[[str, Mapping[str, str], str], tuple[BaseProcess, multiprocessing.connection.Connection]]


def key_of(device: str, env: Mapping[str, str]) -> Key:
    return device, tuple(sorted(env.items()))


@dataclass
class Held:
    """A worker process not owned by a run: ``ready`` once it has said so (a parked one); until then it writes to
    ``log_path`` (an early one's own log, whose tail tells why a start failed)."""

    key: Key
    process: BaseProcess
    conn: multiprocessing.connection.Connection
    log_path: str
    ready: bool


@dataclass(frozen=True)
class Relog:
    """To a held worker taken by a run: write your output to ``path`` from now on."""

    path: str


_parked: list[Held] | None = None  # inside reuse_workers(): workers kept between runs; None outside it
_early: list[Held] = []  # workers started by started_early() blocks, not yet taken
_lock = threading.Lock()  # guards both lists: runner.Worker takes and parks from any thread


def take(key: Key) -> Held | None:
    """A live held worker for ``key``: a parked one first (warm), else an early one (maybe still starting)."""
    with _lock:
        for pool in (_parked or [], _early):
            for n, held in enumerate(pool):
                if held.key == key and held.process.is_alive():
                    del pool[n]
                    return held
    return None


def park(held: Held) -> bool:
    """Keep ``held`` for this process's next run, inside reuse_workers(); False outside it (the caller ends it)."""
    with _lock:
        if _parked is None:
            return False
        _parked.append(held)
        return True


def end(held: Held, wait: float = 5.0) -> None:
    """Ask ``held`` to stop (``wait`` seconds), then kill its process group and what it adopted."""
    if wait > 0:
        with contextlib.suppress(OSError):
            channel.send_job(held.conn, None)
        held.process.join(timeout=wait)
    if held.process.pid:
        hygiene.kill_tree(held.process.pid)
    held.process.join(timeout=5)
    held.conn.close()


@contextlib.contextmanager
def reuse_workers() -> Iterator[None]:
    """Within the block, a run's worker that ends alive is kept for the next run of this process on the same device
    (its imports, CUDA context, compiled and cached kernels stay warm: a GPU worker takes ~5 s to start); each is
    still replaced whenever a case leaves it changed. The demo's steps share workers this way."""
    global _parked
    if _parked is not None:  # nested: the outer block owns the parked workers
        yield
        return
    _parked = []
    try:
        yield
    finally:
        parked, _parked = _parked, None
        for held in parked:
            end(held)


@contextlib.contextmanager
def started_early(spawn: Spawn, device: str, envs: Sequence[Mapping[str, str]]) -> Iterator[None]:
    """A worker for each of ``envs`` on ``device``, spawned now, for the block's runs to take; those not taken
    are killed when it ends (nothing of theirs is worth waiting for). A worker of the same key already held
    (parked, or started early by an outer block) makes an early one needless: none is started for it."""
    wanted = [env for env in envs if not any(h.key == key_of(device, env) for h in [*(_parked or []), *_early])]
    if not wanted:
        yield
        return
    ours: list[Held] = []
    with tempfile.TemporaryDirectory(prefix="kernelkit-early-") as tmp:
        try:
            for n, env in enumerate(wanted):
                log = str(Path(tmp) / f"worker-{n}.log")
                process, conn = spawn(device, env, log)
                ours.append(Held(key_of(device, env), process, conn, log, ready=False))
            with _lock:
                _early.extend(ours)
            yield
        finally:
            with _lock:
                left = [held for held in ours if held in _early]
                for held in left:
                    _early.remove(held)
            for held in left:
                end(held, wait=0)


LOG_TAIL_CHARS = 4000
LOG_READ_BYTES = 4 * LOG_TAIL_CHARS  # the most of a worker's log ever read: its tail, however much was printed


def log_tail(log_path: str, offset: int) -> str:
    """The tail of what a worker printed (its log) since ``offset``: at most LOG_READ_BYTES are read, however much."""
    try:
        with open(log_path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(offset, end - LOG_READ_BYTES))
            text = f.read(LOG_READ_BYTES).decode(errors="replace")
    except OSError:
        return ""
    return text[-LOG_TAIL_CHARS:]
