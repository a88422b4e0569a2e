"""When the results store fails mid-run: every measured result still goes somewhere, and the run says so.

``save`` writes the run's results as the bench JSON document (measure.measurement.bench_document; ``kernelkit
bench --json`` writes the same form) into the first folder that takes it: the cache's ``recovery/`` folder, else the
system's temporary folder. The bench command prints the table and exports as usual, names the file, and exits
with EXIT_NOT_STORED.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelkit.measure.measurement import BenchResult, bench_document


def save(results: Sequence[BenchResult], env: dict[str, Any], run_id: int | None, command: str = "") -> Path | None:
    """The path of the recovery file written, or None when no folder could take it."""
    from kernelkit.cache import cache_dir

    name = f"run-{run_id if run_id is not None else 'unstored'}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    folders: list[Any] = [lambda: cache_dir("recovery"), lambda: Path(tempfile.gettempdir())]
    for folder in folders:
        try:
            path = folder() / name
            path.write_text(bench_document(results, env=env, command=command))
            return path
        except (OSError, ValueError):  # a full or read-only disk: the next folder
            continue
    return None
