"""Slow builds started early: when a run begins, the kernels its impls list that take tens of seconds to build the
first time (a load_inline extension: nvcc over torch's headers) are built in a separate process, while the worker
checks the cases before the first one that needs them.

The worker's own build of the same kernel waits on the build lock and then loads it from the disk cache
(backends/cuda/inline.py), so nothing is built twice; a build that fails here is built again by the worker, which
reports the error as the case's COMPILE_ERROR. The process is stopped when the run ends: a build lands atomically,
so a stopped one leaves nothing behind.

    python -m kernelkit.runs.early DEVICE '[["source", "op", "impl"], ...]'
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from kernelkit import backends

if TYPE_CHECKING:
    from kernelkit.spec import Case


def pending(cases: Sequence[Case], device: str) -> list[tuple[str, str, str]]:
    """(source, op, impl) of each planned impl with an early build; the ops must be loaded in this process."""
    from kernelkit.loading import load

    found: dict[tuple[str, str, str], None] = {}
    for case in cases:
        key = (case.source, case.op, case.impl)
        if key in found:
            continue
        try:
            impl = load(case.source)[case.op].get_impl(case.impl)
        except Exception:  # noqa: BLE001 - not loadable here: its case will say why
            continue
        if impl.backend in backends.names() and backends.backend(impl.backend).early_builds(impl, device):
            found[key] = None
    return list(found)


@contextmanager
def started(cases: Sequence[Case], device: str) -> Iterator[list[tuple[str, str, str]]]:
    """Build the early builds of ``cases`` in a separate process for as long as the block runs; the block gets
    the (source, op, impl) being built (empty: nothing to build early)."""
    todo = pending(cases, device)
    if not todo:
        yield []
        return
    process = subprocess.Popen([sys.executable, "-m", "kernelkit.runs.early", device, json.dumps(todo)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        yield todo
    finally:
        if process.poll() is None:
            from kernelkit.hygiene import kill_group

            kill_group(process.pid)
        process.wait()


def _build(device: str, todo: Sequence[Sequence[str]]) -> None:
    from kernelkit.loading import load

    backends.prepare_process(device)
    for source, op_name, impl_name in todo:
        try:
            impl = load(source)[op_name].get_impl(impl_name)
            for kernel in backends.backend(impl.backend).early_builds(impl, device):
                kernel.compile()
        except Exception:  # noqa: BLE001 - the worker builds it again and reports the failure as the case's
            continue


if __name__ == "__main__":
    _build(sys.argv[1], json.loads(sys.argv[2]))
