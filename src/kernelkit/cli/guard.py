"""What keeps the command line's promises: no raw traceback, pure JSON on stdout, arguments checked before work.

``main`` wraps every command: a KernelkitError is one ``error:`` line (exit 2); any other exception is one line
naming it, with the full trace written to a file whose path is printed (exit 4). ``json_stdout`` keeps stdout for
the JSON document alone while a command runs (what an op file prints on import goes to stderr). The ``check_*``
helpers validate flags before any work starts.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from kernelkit.errors import KernelkitError, SpecError

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30,
          "t": 2**40, "tb": 2**40}


def trace_file(exc: BaseException) -> Path | None:
    """Write ``exc``'s full traceback to a file (the cache's logs/ folder, else the temp folder); its path."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    name = f"kernelkit-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    for folder in (_cache_logs, lambda: Path(tempfile.gettempdir())):
        try:
            path = folder() / name
            path.write_text(f"kernelkit {' '.join(sys.argv[1:])}\n\n{text}")
            return path
        except (OSError, KernelkitError):
            continue
    return None


def _cache_logs() -> Path:
    from kernelkit.cache import cache_dir

    return cache_dir("logs")


def unexpected(exc: BaseException) -> str:
    """The one-line message for an exception nobody expected, naming the file that holds its trace."""
    first = (str(exc).strip().splitlines() or [""])[0]
    path = trace_file(exc)
    where = f"the full trace is in {path}" if path else "no file could take the full trace"
    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: {first} (check that path's permissions and free space); {where}"
    return f"kernelkit failed: {type(exc).__name__}: {first}; {where}"


@contextlib.contextmanager
def json_stdout(active: bool) -> Iterator[None]:
    """While active, whatever this process prints (Python or C) goes to stderr; stdout is back afterwards."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def check_seconds(value: float | None, flag: str, *, zero: bool = False) -> None:
    """KernelkitError unless ``value`` (when given) is finite and positive (or zero, if ``zero``)."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise KernelkitError(f"{flag} must be positive and finite (seconds), got {value}")


def check_output(path: Path | None, flag: str, *, folder: bool = False) -> None:
    """KernelkitError unless ``path`` can be written: a file (or, with ``folder``, a folder) whose nearest
    existing ancestor is a writable folder. Checked before any work, so a bad path loses nothing."""
    if path is None:
        return
    path = path.expanduser()
    if path.exists():
        if folder and not path.is_dir():
            raise KernelkitError(f"{flag} {path}: is a file; give a folder")
        if not folder and path.is_dir():
            raise KernelkitError(f"{flag} {path}: is a folder; give a file path")
        if not os.access(path, os.W_OK):
            raise KernelkitError(f"{flag} {path}: not writable; check its permissions or give another path")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise KernelkitError(f"{flag} {path}: {parent} is a file, not a folder; give another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise KernelkitError(f"{flag} {path}: cannot write in {parent}; check its permissions or give another path")


def parse_bytes(text: str | None, flag: str = "--max-memory") -> int | None:
    """'8G', '512M', '1.5GB', '1000000' -> bytes; None stays None."""
    if text is None:
        return None
    raw = text.strip().lower().replace(" ", "")
    number = raw.rstrip("kmgtbi")
    unit = raw[len(number):].replace("i", "")
    try:
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise KernelkitError(f"{flag} {text!r}: give a size such as 8G, 512M or a number of bytes") from None
    if not math.isfinite(value) or value < 2**20:
        raise KernelkitError(f"{flag} {text!r}: give at least 1M")
    if value >= 2**62:  # setrlimit takes a C long; no machine has 4 EiB
        raise KernelkitError(f"{flag} {text!r}: more than any machine has; give a size such as 64G (at most 4000000T)")
    return int(value)


def set_max_memory(text: str | None) -> None:
    """Hand --max-memory to the workers (spawned later, they inherit the environment; see hygiene.limit_memory)."""
    limit = parse_bytes(text)
    if limit is not None:
        from kernelkit.runner import MAX_MEMORY_ENV

        os.environ[MAX_MEMORY_ENV] = str(limit)


def set_threads(threads: int | None) -> None:
    """Hand --threads to the CPU workers (spawned later, they inherit the environment; see measure.host.cpu_threads)."""
    if threads is None:
        return
    if threads < 1:
        raise SpecError(f"--threads must be a positive number of torch threads for CPU workers, got {threads}")
    from kernelkit.measure.host import THREADS_ENV

    os.environ[THREADS_ENV] = str(threads)
