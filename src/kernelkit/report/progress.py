"""The progress line of a run on a terminal: what it does now (its phase, told by the worker), how many results of
the planned total are in, and the time so far. Nothing is drawn when the output is not a terminal.

    with run_bar(err, "benchmarking") as bar:
        bench_op("square", on_plan=bar.planned, on_phase=bar.phase, on_result=lambda r: bar.done())
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

PHASE_CHARS = 90  # a phase longer than this is cut, so the line fits 120 columns with the bar and counts


class RunBar:
    """One run's progress: ``planned(total)`` once the plan is known, ``phase(text)`` as the work moves on,
    ``done()`` for each result."""

    def __init__(self, progress: Progress, what: str) -> None:
        self.progress, self.what = progress, what
        self.task: TaskID = progress.add_task(what, total=None)

    def planned(self, total: int) -> None:
        self.progress.update(self.task, total=total)

    def phase(self, text: str) -> None:
        shown = text if len(text) <= PHASE_CHARS else text[:PHASE_CHARS - 3] + "..."
        self.progress.update(self.task, description=f"{self.what}: {escape(shown)}")

    def done(self, *_: object) -> None:
        self.progress.update(self.task, advance=1)


@contextmanager
def run_bar(console: Console, what: str, quiet: bool = False) -> Iterator[RunBar]:
    """A transient progress line on ``console``, drawn only on a terminal and unless ``quiet``."""
    progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=True,
                        disable=quiet or not console.is_terminal)
    with progress:
        yield RunBar(progress, what)
