"""Strict mode's benchmark, the worker's side (runs/strict_bench.py plans it and judges what comes back): the
contenders timed on input sets sent as bytes, in rotation, and the outputs of the calls drawn for judging sent back
as bytes.

Timed call n runs on set n mod ROTATION (the same tensors every time round, so the timing is the usual one, plus
the rotation's bookkeeping, a fraction of a microsecond); the outputs of the calls in ``keep`` (drawn by the judging
process: one in each power-of-two range, the last KEPT reached) and of the last call are kept alive and packed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelkit import verify, wire
from kernelkit.errors import describe_exception
from kernelkit.jobs import OnBuilt, caught_warnings
from kernelkit.jobs.bench import (
    JOB_SLACK,
    PER_CONTENDER_SLACK,
    BenchOutcome,
    attach_timing,
    contender_impl,
    device_ceilings,
)
from kernelkit.jobs.strict_worker import SEAL, pack, unpack
from kernelkit.loading import load
from kernelkit.measure import timer
from kernelkit.measure.count import settle_kind
from kernelkit.measure.measurement import BenchResult
from kernelkit.measure.timer import Contender, Settings
from kernelkit.results import Status
from kernelkit.spec import Size

ROTATION = 3
KEPT = 4
RANGES = 24  # call numbers drawn in [2^j, 2^(j+1)) for j < RANGES: up to 16M timed calls


@wire.register
@dataclass
class StrictBenchOutcome(BenchOutcome):
    """A BenchOutcome with what the judging process checks itself: the drawn calls' outputs, as bytes, and the
    harness objects replaced while timing."""

    # impl -> (call number, input set, outputs as bytes, the outputs' storage addresses, all alive when taken)
    rechecks: dict[str, list[tuple[int, int, bytes, tuple[int, ...]]]] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)


class _Rotation:
    """The timed callable: call n on set n mod len(sets); keeps the outputs of the drawn calls and the last."""

    def __init__(self, fn: Callable[..., Any], sets: Sequence[tuple[Any, ...]], keep: frozenset[int]) -> None:
        self.fn, self.sets, self.keep = fn, list(sets), keep
        self.n = 0
        self.kept: list[tuple[int, int, Any]] = []
        self.last: tuple[int, int, Any] | None = None

    def __call__(self) -> None:
        n = self.n
        self.n = n + 1
        which = n % len(self.sets)
        out = self.fn(*self.sets[which])
        self.last = (n, which, out)
        if n in self.keep:
            self.kept.append(self.last)
            if len(self.kept) > KEPT:
                del self.kept[0]

    def packed(self, device: str) -> list[tuple[int, int, bytes, tuple[int, ...]]]:
        if device == "cuda":
            torch.cuda.synchronize()
        chosen = [*self.kept, *([self.last] if self.last is not None and self.last not in self.kept else [])]
        return [(n, which, pack(verify.as_outputs(out)), _storages(out)) for n, which, out in chosen]


def _storages(out: Any) -> tuple[int, ...]:
    return tuple(o.untyped_storage().data_ptr() for o in verify.as_outputs(out)
                 if isinstance(o, torch.Tensor) and o.numel())


@dataclass(frozen=True)
class StrictBenchJob:
    """Time ``contenders`` on the packed input ``sets`` in rotation; outputs of the ``keep`` calls come back."""

    source: str
    op: str
    size: Size
    dtype: str
    contenders: tuple[tuple[str, str], ...]
    settings: Settings
    sets: tuple[bytes, ...]
    keep: frozenset[int]
    cost: tuple[int, int | None, int]  # bytes, flops, working set of one call

    @property
    def timeout(self) -> float:
        per = self.settings.budget + timer.WARMUP_MAX_SECONDS + PER_CONTENDER_SLACK
        return JOB_SLACK + len(self.contenders) * per

    def _result(self, name: str, role: str, device: str, status: Status, message: str = "",
                backend: str = "?") -> BenchResult:
        return BenchResult(self.op, name, backend, self.size, self.dtype, device, self.settings.mode, status,
                           role=role, message=message)

    def failed(self, device: str, status: Status, message: str, log: str = "") -> StrictBenchOutcome:
        return StrictBenchOutcome([self._result(n, r, device, status, message) for n, r in self.contenders], log=log)

    def execute(self, device: str, on_built: OnBuilt | None = None) -> StrictBenchOutcome:
        notices: list[str] = []
        with caught_warnings(notices):
            outcome = self._execute(device, on_built, notices)
        outcome.record_warnings(notices)
        return outcome

    def _execute(self, device: str, on_built: OnBuilt | None, notices: list[str]) -> StrictBenchOutcome:
        op = load(self.source)[self.op]
        sets = [unpack(s, device) for s in self.sets]
        nbytes, flops, working = self.cost  # counted by the judging process: the FLOPs' matmul rate is set here
        settle_kind(op, sets[0])
        ceilings = device_ceilings(device, notices) if self.settings.calibrate else None
        outcome = StrictBenchOutcome([])
        entries: list[tuple[BenchResult, Contender, _Rotation]] = []
        for name, role in self.contenders:
            impl = contender_impl(op, name)
            result = self._result(name, role, device, Status.PASSED, backend=impl.backend)
            outcome.results.append(result)
            rotation = _Rotation(impl.fn, [verify.fresh_copies(s) for s in sets], self.keep)
            try:
                first = timer.first_call(rotation, device)
            except Exception as exc:  # noqa: BLE001 - reported as this contender's status
                result.status, result.message = Status.RUNTIME_ERROR, describe_exception(exc)
                continue
            fn = impl.fn
            entries.append((result, Contender(impl.name, rotation, nbytes, flops, working, first_call=first,
                                              args=rotation.sets[0],
                                              make_call=lambda copies, fn=fn: lambda: fn(*copies)), rotation))
        if on_built is not None:
            on_built()
        measured = timer.bench_many([c for _, c, _ in entries], self.settings, device)
        for (result, _, rotation), m in zip(entries, measured, strict=True):
            if not attach_timing(result, m, nbytes, flops, ceilings, op):
                continue
            outcome.rechecks[result.impl] = rotation.packed(device)
        outcome.tampered = SEAL.tampered()
        return outcome


