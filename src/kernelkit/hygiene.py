"""What a case may leave behind in its worker process, and how a worker tells.

A worker is reused from case to case only while every case leaves it as it found it. After each job the worker
compares a ``snapshot`` of its process state (working directory, environment, thread counts, torch's global
switches, memory, processes it started, the CUDA context) with the one taken before the job; ``changes`` names
what differs, and the runner then replaces the worker, so the next case starts from a clean process. Taking a
snapshot costs well under a millisecond; replacing a worker costs a process start (torch's import, seconds), paid
only after a case that changed something.

Workers also run in a session of their own (``os.setsid`` first thing), so that the runner can kill the worker
with every process it started (``kill_group``), not the worker alone; and, on Linux, as a child subreaper
(``become_subreaper``), so that a process that leaves the session (``setsid -f``, a daemon's double fork) is
re-parented to the worker when its parent exits, seen by the snapshot as the worker's child and killed with it
(``kill_tree``, ``kill_descendants``). A worker whose runner dies without stopping it (SIGKILL) ends itself, with
what it started, within a second (``exit_with_parent``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil

# Memory a case may leave allocated in the worker before it is replaced: more than caches and lazily imported
# libraries take (inductor's import is a few hundred MB), less than a leak that starves the next case.
RSS_GROWTH_LIMIT = 1 << 30
GPU_GROWTH_LIMIT = 1 << 30


@dataclass
class Snapshot:
    """The process state a case must leave as it found it (``memory`` and ``gpu_memory`` may grow a little)."""

    cwd: str
    env: dict[str, str]
    switches: dict[str, Any]
    threads: dict[int, str]  # ident -> name, of the threads not started by a library (library_thread)
    memory: int
    gpu_memory: int
    children: list[int] = field(default_factory=list)


def snapshot(device: str, kept: int = 0) -> Snapshot:
    """This process's state now; ``kept``: bytes the worker's own caches hold on ``device`` (the references a worker
    keeps between the cases of one size), which are not counted as memory a case left."""
    import torch

    try:
        cwd = os.getcwd()
    except OSError:  # the directory was removed under us
        cwd = "<removed>"
    switches = {
        "torch threads": torch.get_num_threads(),
        "torch interop threads": torch.get_num_interop_threads(),
        "default dtype": str(torch.get_default_dtype()),
        "grad mode": torch.is_grad_enabled(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "umask": _umask(),
        "SIGINT handler": str(signal.getsignal(signal.SIGINT)),
    }
    gpu = 0
    if device == "cuda" and torch.cuda.is_initialized():
        switches["tf32 matmul"] = torch.backends.cuda.matmul.allow_tf32
        switches["cuda device"] = torch.cuda.current_device()
        gpu = torch.cuda.memory_allocated() - kept
    threads = {t.ident or 0: t.name for t in threading.enumerate() if not library_thread(t)}
    memory = resident_bytes() - (kept if device == "cpu" else 0)
    return Snapshot(cwd, dict(os.environ), switches, threads, memory, gpu, sorted({*group_members(), *children()}))


_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def spawn_without_main() -> Iterator[None]:
    """Start spawned processes inside this block without the parent's ``__main__`` module.

    multiprocessing's spawn imports the parent's main script again in the child (as ``__mp_main__``), for objects
    defined there; a worker needs none (its target and every job come from kernelkit or from the user's file, loaded
    by path), and a script that calls kk.check without an ``if __name__ == "__main__":`` guard would run again in
    each worker, up to its own kk.check, which fails there. While the block runs, ``__main__`` shows no file and no
    spec, which is what spawn reads to decide; a lock keeps threads that start workers together from restoring each
    other's view."""
    main = sys.modules.get("__main__")
    with _MAIN_LOCK:
        saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if main and name in main.__dict__}
        try:
            main.__dict__.pop("__file__", None)
            if "__spec__" in saved:
                main.__spec__ = None
            yield
        finally:
            for name, value in saved.items():
                setattr(main, name, value)


def restore_emptied(before: Snapshot) -> None:
    """Unset again each variable that was unset before the job and is now the empty string.

    ``saved = os.environ.get(key, ""); ...; os.environ[key] = saved`` is how a context manager "restores" a variable
    that was not set (GPU MODE's DeterministicContext does it with CUBLAS_WORKSPACE_CONFIG in every reference call);
    every reader of the environment takes "" as not set, so it is not a change worth a new worker (seen on an H200:
    each case of a GPU MODE task replaced its worker, 153 s to check vectoradd's 10 specs)."""
    for key in [k for k, v in os.environ.items() if v == "" and k not in before.env]:
        del os.environ[key]


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """What differs, one short phrase each (empty when the process is as it was)."""
    found = []
    if before.cwd != after.cwd:
        found.append(f"cwd={after.cwd}")
    keys = sorted(set(before.env) | set(after.env))
    # A library's private variables (a leading _: inductor records a pointer in one on its first compile) are
    # its own bookkeeping, not the user's environment.
    changed_env = [k for k in keys if before.env.get(k) != after.env.get(k) and not k.startswith("_")
                   and k not in LIBRARY_ENV]
    for key in changed_env[:4]:
        found.append(f"{key}={_short(after.env[key])}" if key in after.env else f"{key} unset")
    if len(changed_env) > 4:
        found.append(f"{len(changed_env) - 4} more environment variables")
    for name, value in after.switches.items():
        # A switch that did not exist before (CUDA's, read once CUDA is initialised) is not a change.
        if name in before.switches and before.switches[name] != value:
            found.append(f"{name}={value}")
    new = [name for ident, name in after.threads.items() if ident not in before.threads]
    if new:
        shown = ", ".join(new[:3]) + (f" and {len(new) - 3} more" if len(new) > 3 else "")
        found.append(f"{len(new)} Python thread(s) still running ({shown})")
    if after.memory - before.memory > RSS_GROWTH_LIMIT:
        found.append(f"{(after.memory - before.memory) / 2**30:.1f} GiB more memory held")
    if after.gpu_memory - before.gpu_memory > GPU_GROWTH_LIMIT:
        found.append(f"{(after.gpu_memory - before.gpu_memory) / 2**30:.1f} GiB more GPU memory held")
    left = [p for p in after.children if p not in before.children and not _library_pool(p)]
    if left:
        found.append(f"{len(left)} process(es) it started still running")
    return found


# Variables a library sets for itself on first use and keeps: inductor points Triton at torch's bundled ptxas on its
# first GPU compile (seen on an H200: every bench group's compile replaced its worker); kernelkit's compile backend
# points inductor's cache into kernelkit's (backends/compiled.py).
LIBRARY_ENV = frozenset({"TRITON_PTXAS_PATH", "TORCHINDUCTOR_CACHE_DIR"})

# Modules whose threads are a library's own, started once and kept for every later call: inductor's compile pool
# (its reader thread "InductorSubproc" and its idle timer), tqdm's monitor (which inductor's autotuning starts), the
# profiler's CUPTI monitor. Seen on an H200 (2026-11-26): the first torch.compile in a GPU worker left
# InductorSubproc and tqdm_monitor running, and every bench group replaced its worker. Like LIBRARY_POOLS, they are
# the library's, not the case's; a thread whose target or class is the user's own code is still a change.
LIBRARY_THREAD_MODULES = ("torch.", "triton.", "numba.", "tqdm.", "kernelkit.")


def library_thread(thread: threading.Thread) -> bool:
    """True for the main thread, a thread Python made for native code (``_DummyThread``: a profiler's or a CUDA
    callback's), a thread whose target lives in a library (LIBRARY_THREAD_MODULES), and an idle worker of a thread
    pool (``idle_pool_thread``)."""
    if thread is threading.main_thread() or isinstance(thread, threading._DummyThread):
        return True
    target = getattr(thread, "_target", None)
    owner = getattr(target, "__module__", None) if target is not None else type(thread).__module__
    return (owner or "").startswith(LIBRARY_THREAD_MODULES) or idle_pool_thread(thread)


def idle_pool_thread(thread: threading.Thread) -> bool:
    """A ThreadPoolExecutor's worker waiting for work: it runs nothing until the pool is given a task. Inductor keeps
    one for its compiles (seen on a 2-core CPU with an empty cache: every bench group replaced its worker for
    ThreadPoolExecutor-1_0). A pool thread still running a task is busy, and a change."""
    target = getattr(thread, "_target", None)
    if getattr(target, "__module__", None) != "concurrent.futures.thread" or thread.ident is None:
        return False
    frame = sys._current_frames().get(thread.ident)
    # Waiting, the innermost Python frame is the pool's own loop, blocked in its queue's get (C code).
    return frame is not None and frame.f_code is getattr(target, "__code__", None)


def resident_bytes() -> int:
    """This process's resident memory in bytes (0 where psutil cannot read it)."""
    try:
        return psutil.Process().memory_info().rss
    except psutil.Error:
        return 0


def group_members(group: int | None = None) -> list[int]:
    """The live processes (zombies left out) of process group ``group`` (default: this process's), this one excluded.

    Whoever their parent is: children, grandchildren, and a process that left the children lists but stayed in the
    group (a daemon's double fork without setsid), all of which kill_group ends with the worker. A process that
    left the group (setsid, start_new_session) is out of kill_group's reach and is not listed either. The cost is
    one getpgid per process on the machine: 0.12 / 0.44 / 1.5 ms with 90 / 600 / 2,000 processes on a 2-core VM,
    0.25 ms with 190 on the H200 machine (2026-11); psutil's children() reads every process's /proc stat file
    instead (1 / 7 / 28 ms on the VM)."""
    group = os.getpgrp() if group is None else group
    me = os.getpid()
    found = []
    for pid in psutil.pids():
        try:
            if pid == me or os.getpgid(pid) != group:
                continue
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
        except (OSError, psutil.Error):  # gone since pids() listed it
            continue
    return found


def children(pid: int | None = None) -> list[int]:
    """The live direct children of process ``pid`` (default: this one), zombies left out. In a subreaper (a worker)
    they include every orphaned descendant, in this process's group or not: with group_members, every process a
    case left running has an ancestor among them. Read from /proc/PID/task/*/children where the kernel has it
    (microseconds), else from psutil, which reads every process's stat file."""
    pid = os.getpid() if pid is None else pid
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        for task in tasks:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.update(int(n) for n in f.read().split())
    except (OSError, ValueError):
        try:
            found = {p.pid for p in psutil.Process(pid).children()}
        except psutil.Error:
            return []
    return [n for n in sorted(found) if _live(n)]


def _live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# Processes a library starts once and keeps for every later call: inductor's compile workers (torch.compile
# starts this pool on its first compile on a machine with several cores). They are torch's, not the case's.
LIBRARY_POOLS = ("compile_worker",)


def _library_pool(pid: int) -> bool:
    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    return any(mark in arg for arg in cmdline for mark in LIBRARY_POOLS)


def kill_group(pid: int) -> None:
    """SIGKILL process group ``pid`` (a worker that leads its own session, and everything it started)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int) -> None:
    """SIGKILL process ``pid``, its process group and every descendant, in its group or not."""
    try:
        root = psutil.Process(pid)
        root.suspend()
    except psutil.Error:
        kill_group(pid)  # gone: what stayed in its group goes too
        return
    stopped = _stop_descendants(root)
    kill_group(pid)
    for p in (root, *stopped):
        with contextlib.suppress(psutil.Error):
            p.kill()


ORPHAN_POLL_S = 0.5  # how often a worker looks whether its runner is still its parent
EXIT_ORPHANED = 75  # a worker's exit code when its runner died first (nobody waits for it: for logs and tests)


def exit_with_parent(poll: float = ORPHAN_POLL_S) -> None:
    """End this process, and what it started, once its parent is gone: a runner killed outright (SIGKILL, the OOM
    killer, a CI job's time limit) must not leave its worker running, or hanging in, the job it was given. A
    daemon thread compares the parent's pid with the one at the start: an orphan is given another parent (init,
    or a subreaper)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        kill_descendants()
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="kernelkit-parent-watch", daemon=True).start()



def kill_descendants() -> None:
    """SIGKILL every descendant of this process (a worker that ends: what it adopted would otherwise outlive it)."""
    for p in _stop_descendants(psutil.Process()):
        with contextlib.suppress(psutil.Error):
            p.kill()


def _stop_descendants(root: psutil.Process) -> list[psutil.Process]:
    """Every descendant of ``root`` (psutil lists them recursively), each stopped (SIGSTOP) so that it forks no
    more; the list is read again until nothing new appears (a child may fork between the listing and its stop)."""
    stopped: dict[int, psutil.Process] = {}
    for _ in range(4):
        try:
            new = [p for p in root.children(recursive=True) if p.pid not in stopped]
        except psutil.Error:
            break
        if not new:
            break
        for p in new:
            with contextlib.suppress(psutil.Error):
                p.suspend()
            stopped[p.pid] = p
    return list(stopped.values())


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Linux: make this process a child subreaper, the parent of every orphaned descendant (one whose parent
    exited), so a process that left the session stays within reach. False where the kernel does not offer it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def own_session() -> None:
    """Lead a new session (and process group), so the runner can kill this process with its children."""
    try:
        os.setsid()
    except OSError:  # already a group leader
        pass


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _short(value: str) -> str:
    return value if len(value) <= 40 else value[:37] + "..."


def limit_memory(device: str, limit: str) -> None:
    """--max-memory (``limit``, bytes as text; runner.MAX_MEMORY_ENV): on the CPU an address-space limit on this
    process (the bytes on top of what it holds once started); on a GPU the caching allocator's share of the
    device's memory. Nothing when ``limit`` is empty, not a number or not positive."""
    import resource

    import torch

    try:
        size = int(limit or "0")
    except ValueError:
        return
    if size <= 0:
        return
    if device == "cuda":
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, size / total))
        return
    held = psutil.Process().memory_info().vms  # the address space this process holds once started
    if held:
        resource.setrlimit(resource.RLIMIT_AS, (held + size, resource.RLIM_INFINITY))


def redirect_output(log_path: str) -> None:
    """This process's stdout and stderr (file descriptors 1 and 2, and Python's streams) into ``log_path``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
