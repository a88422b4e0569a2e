"""What runs in a worker process: a Job, and the result it sends back.

A job is plain, picklable data. The runner's Worker sends it to a worker process, which calls ``execute(device,
on_built)`` there and sends back the result; when the worker dies or hangs, the Worker asks the job for the result
that says so (``failed``). Two jobs ship with kernelkit: ``CheckJob`` (check.py: one case against its reference,
with ``judge``, the order of the checks) and ``BenchJob`` (bench.py: the impls of one size and dtype timed side by
side); formats.jobs.VerdictJob is a third.

What the worker warns about while it runs a job (Python warnings, kernelkit's own notices) travels back in the
result's ``warnings`` (``caught_warnings``), not only into the worker's log.
"""

from __future__ import annotations

import os
import sysconfig
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from kernelkit.results import Status

OnBuilt = Callable[[], None]


class JobResult(Protocol):
    """What a job sends back: how it ended, what the worker printed (kept when it failed), and details (a lost
    CUDA context sets ``details["context_lost"]``: the worker is then replaced)."""

    status: Status
    log: str
    details: dict[str, Any]


class Job(Protocol):
    """Work for a worker process."""

    def execute(self, device: str, on_built: OnBuilt | None = None) -> JobResult:
        """Run here on ``device``; call ``on_built`` once what must be built is (the case's own clock starts), and
        again before each further call of a job that makes several (each then gets the whole limit)."""
        ...

    def failed(self, device: str, status: Status, message: str, log: str = "") -> JobResult:
        """The result of this job when it could not run to the end (TIMEOUT, CRASHED, ...)."""
        ...


# CUDA errors that leave the context unusable: every later call in the process fails with them too (sticky).
STICKY_CUDA_ERRORS = ("illegal memory access", "an illegal instruction", "misaligned address",
                      "unspecified launch failure")
# Any other CUDA error poisons a worker only when it persists (torch.AcceleratorError, torch's "CUDA error: ...").
CUDA_ERROR_MARKS = ("CUDA error", "AcceleratorError")


def poisoned(result: JobResult, probe: Callable[[], bool] | None = None) -> bool:
    """Whether the worker that sent ``result`` must be replaced before its next job: its CUDA context was found
    lost (``details["context_lost"]``), or a message of the result (the case's, each contender's, each strict
    call's error) names a sticky CUDA error. One rule for every job, read by the worker and by its runner.
    ``probe`` (the worker's, on a GPU: is the context still usable?) is asked when a message names another CUDA
    error; a context it finds lost is recorded in ``details``, so the runner reads the same verdict."""
    if result.details.get("context_lost"):
        return True
    texts = [getattr(result, "message", ""), *(getattr(r, "message", "") for r in getattr(result, "results", ())),
             *(getattr(c, "error", "") for c in getattr(result, "calls", ()))]
    texts = [t for t in texts if isinstance(t, str) and t]
    if any(error in text for text in texts for error in STICKY_CUDA_ERRORS):
        return True
    if probe is not None and any(mark in text for text in texts for mark in CUDA_ERROR_MARKS) and probe():
        result.details["context_lost"] = True
        return True
    return False


def warn(result: JobResult, text: str) -> None:
    """Add ``text`` to the warnings of ``result`` (a case's, or every result of a bench job's outcome)."""
    for each in getattr(result, "results", None) or [result]:
        notes = getattr(each, "warnings", None)
        if isinstance(notes, list) and text not in notes:
            notes.append(text)


LIBRARY_MARK = "library: "  # a warning raised in an installed library's code, not the user's or kernelkit's


@contextmanager
def caught_warnings(notices: list[str], echo: bool = True) -> Iterator[None]:
    """Python warnings raised in the block, as one line each in ``notices`` (and, with ``echo``, still printed: into
    the worker's log); those raised in an installed library's code (torch's, numpy's deprecations) start with
    LIBRARY_MARK, so a report can count them in one line instead of showing each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        try:
            yield
        finally:
            for w in caught:
                mark = LIBRARY_MARK if library_file(w.filename) else ""
                notices.append(f"{mark}{w.category.__name__}: {w.message} ({Path(w.filename).name}:{w.lineno})")
                if echo:
                    print(warnings.formatwarning(w.message, w.category, w.filename, w.lineno), end="")


def library_file(filename: str) -> bool:
    """Whether ``filename`` is an installed library's (site-packages, the standard library), not kernelkit's own."""
    path = str(Path(filename).resolve()) if filename else ""
    if not path or f"{os.sep}kernelkit{os.sep}" in path:
        return False
    roots = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib")}
    return "site-packages" in path or "dist-packages" in path or any(path.startswith(r) for r in roots)


def unique(lines: Sequence[str]) -> list[str]:
    """``lines`` without repeats, in order."""
    return list(dict.fromkeys(lines))
