"""What the timer times: one callable with the cost model of one call (the timer, its environment and every mode
read it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Contender:
    """One callable to time, with the cost model of one call.

    ``args`` and ``make_call`` let graph mode rotate copies of the inputs (cold replays): ``make_call(copies)``
    returns the same call on other arguments. Without them graph mode replays warm, and says so.
    """

    label: str
    fn: Callable[[], Any]
    bytes: int | None = None
    flops: int | None = None
    working_set: int | None = None  # bytes one call touches (inputs and outputs)
    first_call: float | None = None  # seconds, when the caller already made (and timed) the first call
    args: tuple[Any, ...] = ()
    make_call: Callable[[tuple[Any, ...]], Callable[[], Any]] | None = None
