"""A sweep's groups as Ray tasks: one task per (op, size, dtype) group, one GPU each (``num_gpus=1``; on the CPU
``num_cpus=1``), results streamed back to the caller (``ray.wait``) as each task finishes.

Ray places the tasks, pins each to its GPU (CUDA_VISIBLE_DEVICES) and retries a task whose worker or node died
(``MAX_RETRIES``); kernelkit adds nothing to that. Inside a task the group's jobs run in kernelkit's own isolated
worker process on that node, so a crash, hang or lost CUDA context there costs one case, as it does locally.

The op must load on every node: a built-in op comes with kernelkit, which each node needs installed (the same
version). A user's .py file is shipped with its task as text and written to the node's temp directory when its
path does not exist there; a file that imports modules beside it, or loads a .cu file by a relative path, needs
those files at the same path on every node (a shared filesystem).
"""

from __future__ import annotations

import hashlib
import os
import platform
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelkit.errors import SpecError
from kernelkit.results import Status
from kernelkit.scale.shard import GroupRun, drain

MAX_RETRIES = 2  # a task whose worker process or node died runs again from its start, elsewhere if Ray can

# One warm kernelkit worker per Ray worker process and GPU: Ray reuses its worker processes from task to task, and
# a worker's start (importing torch, triton) costs seconds that a group of a few cases should not pay each time.
_node_workers: dict[tuple[str, str], Any] = {}


def require() -> ModuleType:
    """The ray module; SpecError saying how to install it when it is missing."""
    try:
        import ray
    except ImportError:
        raise SpecError("--ray needs Ray, which is not installed here: pip install 'kernelkit[ray]' "
                        "(or scripts/install triton,numba,cuda,ray)") from None
    return ray


def connect(address: str) -> ModuleType:
    """Join the Ray cluster at ``address`` ('auto': the one this host runs; 'local': start one here) unless this
    process already joined one."""
    ray = require()
    if not ray.is_initialized():
        try:
            if address == "local":
                ray.init(include_dashboard=False)
            else:
                ray.init(address=address)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise SpecError(f"--ray {address}: cannot join a Ray cluster there ({exc}); start one with `ray start "
                            "--head`, pass its address, or use --ray local") from None
    return ray


def run_groups(runs: Sequence[GroupRun], device: str, address: str, emit: Callable[[Any], None]) -> list[str]:
    """Run each group as a Ray task; ``emit`` every result here as its task finishes. A task that fails for good
    gives failed results (CRASHED) for the jobs of its group. Returns the failed tasks' reasons."""
    ray = connect(address)
    resources = {"num_gpus": 1} if device == "cuda" else {"num_cpus": 1}
    task = ray.remote(max_retries=MAX_RETRIES, **resources)(run_on_node)
    shipped = {r.source: Path(r.source).read_text() for r in runs if r.source.endswith(".py")}
    pending = {task.remote(run, device, shipped.get(run.source)): run
               for run in sorted(runs, key=lambda r: -r.cost)}
    failures: list[str] = []
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                run = pending.pop(ref)
                try:
                    items = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    failures.append(why)
                    items = drain(run, device, Status.CRASHED, f"the Ray task failed: {why}")
                for item in items:
                    emit(item)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    return failures


def run_on_node(run: GroupRun, device: str, source_text: str | None) -> list[Any]:
    """The body of a task: the group's jobs in this node's kernelkit worker; every result with its GPU and host."""
    if source_text is not None and not Path(run.source).exists():
        run = run.moved(_write_copy(run.source, source_text))
    worker = _node_worker(device)
    gpu, host = _gpu_id(), platform.node()
    items: list[Any] = []
    while (step := run.next_job()) is not None:
        job, seconds = step
        for item in run.take(job, worker.run(job, seconds)):
            item.gpu = gpu
            item.details["host"] = host
            items.append(item)
    return items


def _node_worker(device: str) -> Any:
    from kernelkit import runner

    key = (device, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    if key not in _node_workers:
        logs = Path(tempfile.mkdtemp(prefix="kernelkit-ray-"))
        _node_workers[key] = runner.Worker(device, logs / "worker.log")
    return _node_workers[key]


def _write_copy(path: str, text: str) -> str:
    """The shipped op file written under this node's temp directory (one folder per content, never overwritten)."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    copy = Path(tempfile.gettempdir()) / "kernelkit-ray-ops" / digest / Path(path).name
    if not copy.exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        partial = copy.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(copy)
    return str(copy)


def _gpu_id() -> int | None:
    """The GPU Ray gave this task, by its index on the node; None on the CPU."""
    import ray

    ids = ray.get_gpu_ids()
    try:
        return int(ids[0]) if ids else None
    except (TypeError, ValueError):
        return None
