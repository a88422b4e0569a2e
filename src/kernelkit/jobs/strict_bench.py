"""Strict mode's benchmark, the worker's side (runs/strict_bench.py plans it and judges what comes back): the
contenders timed on input sets sent as bytes, each call on a set drawn at random, and the outputs of the calls
drawn for judging sent back as bytes.

Each timed call runs on one of the sets, drawn from os.urandom when the call before it has returned (the first when
the rotation is made), so no order exists before it is used: a cache keyed on a call count answers for the wrong
set. Whether a call's output is kept is drawn after that call returned, never before: one call in each
power-of-two range of call numbers is kept (reservoir sampling: call n of a range that began at call b replaces the
range's pick with probability 1/(n - b + 1)), the picks of the last ``len(sets)`` ranges reached and the last call
stay alive and are packed, so an answer returned twice from the same storage meets itself (more kept calls than
sets). The draws live in the rotation's closure, not in attributes; the impl runs in this process and could still
read them by inspecting frames, but never a draw that is yet to be made. The rotation costs about 0.7 us of host
time per timed call (0.3 us of it the os.urandom read; measured on the CPU), inside the timed window; the same
tensors serve every time round, so the timing is otherwise the usual one.
"""

from __future__ import annotations

import os
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
from kernelkit.jobs.strict_worker import SEAL, Drawn, Undrawn, pack, set_inputs
from kernelkit.loading import load
from kernelkit.measure import timer
from kernelkit.measure.count import settle_kind
from kernelkit.measure.measurement import BenchResult
from kernelkit.measure.timer import Contender, Settings
from kernelkit.results import Status
from kernelkit.spec import Size, parse_dtype

Kept = tuple[int, int, Any]  # (call number, input set, what the call returned)


@wire.register
@dataclass
class StrictBenchOutcome(BenchOutcome):
    """A BenchOutcome with what the judging process checks itself: the drawn calls' outputs, as bytes, and the
    harness objects replaced while timing."""

    # impl -> (call number, input set, outputs as bytes, the outputs' storage addresses, all alive when taken)
    rechecks: dict[str, list[tuple[int, int, bytes, tuple[int, ...]]]] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)
    undrawn: bool = False  # the sets made here from their seeds were not the judge's: nothing was timed


def rotation(fn: Callable[..., Any], sets: Sequence[tuple[Any, ...]]
             ) -> tuple[Callable[[], None], Callable[[str], list[tuple[int, int, bytes, tuple[int, ...]]]]]:
    """The timed callable over ``sets`` (a bare closure: no attributes to read) and the function that packs its
    kept outputs on ``device`` once timing is done: (call number, input set, outputs as bytes, storage addresses).
    """
    count = len(sets)
    picks: dict[int, Kept] = {}  # power-of-two range of call numbers -> the call kept from it so far
    urandom, from_bytes = os.urandom, int.from_bytes  # bound once: the draw is inside the timed window
    state: list[Any] = [0, from_bytes(urandom(4), "little") % count, None]  # next call, its input set, the last call

    def timed() -> None:
        n, which = state[0], state[1]
        out = fn(*sets[which])
        raw = from_bytes(urandom(8), "little")  # the next call's set (high half), whether this one is kept (low)
        last = (n, which, out)
        state[0], state[1], state[2] = n + 1, (raw >> 32) % count, last  # modulo bias: count / 2^32
        band = n.bit_length()  # 0: call 0; b: calls 2^(b-1) .. 2^b - 1
        if (raw & 0xFFFFFFFF) % (n - ((1 << band) >> 1) + 1) == 0:
            picks[band] = last
            if band - count in picks:
                del picks[band - count]

    def packed(device: str) -> list[tuple[int, int, bytes, tuple[int, ...]]]:
        if device == "cuda":
            torch.cuda.synchronize()
        chosen = sorted(picks.values(), key=lambda kept: kept[0])
        last = state[2]
        if last is not None and all(kept[0] != last[0] for kept in chosen):
            chosen.append(last)
        return [(n, which, pack(verify.as_outputs(out)), _storages(out)) for n, which, out in chosen]

    return timed, packed


def _storages(out: Any) -> tuple[int, ...]:
    return tuple(o.untyped_storage().data_ptr() for o in verify.as_outputs(out)
                 if isinstance(o, torch.Tensor) and o.numel())


@dataclass(frozen=True)
class StrictBenchJob:
    """Time ``contenders`` on the packed input ``sets``, drawn at random call by call; the outputs of calls drawn
    after they returned come back."""

    source: str
    op: str
    size: Size
    dtype: str
    contenders: tuple[tuple[str, str], ...]
    settings: Settings
    sets: tuple[bytes | Drawn, ...]
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
        try:
            sets = [set_inputs(s, op, parse_dtype(self.dtype), device) for s in self.sets]
        except Undrawn:  # the judge sends the sets as bytes instead
            return StrictBenchOutcome([], undrawn=True)
        nbytes, flops, working = self.cost  # counted by the judging process: the FLOPs' matmul rate is set here
        settle_kind(op, sets[0])
        ceilings = device_ceilings(device, notices) if self.settings.calibrate else None
        outcome = StrictBenchOutcome([])
        entries: list[tuple[BenchResult, Contender, Callable[[str], Any]]] = []
        for name, role in self.contenders:
            impl = contender_impl(op, name)
            result = self._result(name, role, device, Status.PASSED, backend=impl.backend)
            outcome.results.append(result)
            copies = [verify.fresh_copies(s) for s in sets]
            timed, packed = rotation(impl.fn, copies)
            try:
                first = timer.first_call(timed, device)
            except Exception as exc:  # noqa: BLE001 - reported as this contender's status
                result.status, result.message = Status.RUNTIME_ERROR, describe_exception(exc)
                continue
            fn = impl.fn
            entries.append((result, Contender(impl.name, timed, nbytes, flops, working, first_call=first,
                                              args=copies[0], make_call=lambda args, fn=fn: lambda: fn(*args)),
                            packed))
        if on_built is not None:
            on_built()
        measured = timer.bench_many([c for _, c, _ in entries], self.settings, device)
        for (result, _, packed), m in zip(entries, measured, strict=True):
            if not attach_timing(result, m, nbytes, flops, ceilings, op):
                continue
            outcome.rechecks[result.impl] = packed(device)
        outcome.tampered = SEAL.tampered()
        return outcome


