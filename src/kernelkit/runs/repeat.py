"""``kernelkit bench --repeat N``: the sweep run N times, to measure how much a case's median moves between runs.

A median's bootstrap interval covers the noise inside one run, not the drift between runs (clocks, placement,
other work on the machine): back-to-back runs of unchanged code differ by a few %. Run N times, each case's
between-run spread, (max - min) / median of its N medians, is recorded with its result (details["run_spread"],
the N medians in details["run_medians"]); ``kernelkit compare`` then takes it as the case's noise floor. Only the
last run is stored and shown: its results carry the spread of all N.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from kernelkit.errors import SpecError
from kernelkit.measure.measurement import BenchResult
from kernelkit.runs.bench import SweepReport, bench_op
from kernelkit.store.compare import SPREAD_KEY

MEDIANS_KEY = "run_medians"


def bench_repeated(target: str, repeat: int, *, store: Any = None,
                   on_result: Callable[[BenchResult], None] | None = None, **options: Any) -> SweepReport:
    """``bench_op(target, **options)`` ``repeat`` times; the last run's report, each timed result carrying the
    between-run spread of its median. Stored (when ``store`` is given) once, with the last run's results."""
    if repeat < 1:
        raise SpecError(f"--repeat must be at least 1, got {repeat}")
    medians: dict[tuple[str, str, str], list[float]] = {}
    if options.get("on_plan") is not None:
        options["on_plan"] = _once_times(options["on_plan"], repeat)

    def remember(result: BenchResult) -> None:
        if result.measurement is not None and result.measurement.samples and not result.status.failed:
            medians.setdefault(_key(result), []).append(result.measurement.median)
        if on_result is not None:
            on_result(result)

    for _ in range(repeat - 1):
        earlier = bench_op(target, store=None, on_result=remember, **options)
        if earlier.interrupted:
            return earlier
    return bench_op(target, store=_WithSpread(store, medians) if store is not None else None,
                    on_result=on_result if store is not None else _attaching(medians, on_result), **options)


def _once_times(on_plan: Callable[[int], None], repeat: int) -> Callable[[int], None]:
    """``on_plan`` told the N runs as one plan: once, with N times one run's results."""
    said: list[int] = []

    def tell(total: int) -> None:
        if not said:
            said.append(total)
            on_plan(total * repeat)

    return tell


def attach_spread(result: BenchResult, earlier: dict[tuple[str, str, str], list[float]]) -> None:
    """Record in ``result`` the spread of its median with the earlier runs' medians of the same case."""
    if result.measurement is None or not result.measurement.samples or result.status.failed:
        return
    runs = [*earlier.get(_key(result), []), result.measurement.median]
    if len(runs) < 2:
        return
    result.details[MEDIANS_KEY] = runs
    result.details[SPREAD_KEY] = (max(runs) - min(runs)) / statistics.median(runs)


def _key(result: BenchResult) -> tuple[str, str, str]:
    return result.case_id, result.mode, result.role


def _attaching(medians: dict[tuple[str, str, str], list[float]],
               on_result: Callable[[BenchResult], None] | None) -> Callable[[BenchResult], None]:
    def attach(result: BenchResult) -> None:
        attach_spread(result, medians)
        if on_result is not None:
            on_result(result)

    return attach


class _WithSpread:
    """A results store that adds the between-run spread to each result before storing it."""

    def __init__(self, store: Any, medians: dict[tuple[str, str, str], list[float]]) -> None:
        self._store, self._medians = store, medians

    def add_result(self, run_id: int, result: BenchResult) -> None:
        attach_spread(result, self._medians)
        self._store.add_result(run_id, result)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
