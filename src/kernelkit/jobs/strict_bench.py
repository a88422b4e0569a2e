"""Strict mode's benchmark: strict checks as the gate, timed calls on rotating secret inputs, rechecked here.

For one (op, size, dtype):
1. each case is checked in strict mode (jobs/strict.py); only PASSED ones are timed;
2. this process draws ROTATION input sets from secret seeds and computes their references; the worker gets the
   inputs only, as bytes. Timed call n runs on set n mod ROTATION (the same tensors every time round, so the
   timing is the usual one, plus the rotation's bookkeeping, a fraction of a microsecond), and the outputs of
   calls whose numbers this process drew at random (one in each power-of-two range, the last KEPT reached) and
   of the last call come back as bytes, to be judged here against their own set's reference;
3. the baselines are timed in a job of their own, on sets of their own: the eager baseline is the reference,
   and its outputs must not sit in the process that runs the impls;
4. a harness object replaced while timing is CHEATED; a time above SUSPECT_PCT of the calibrated ceiling is
   SUSPECT, a failure here (outside strict mode it is a flag in the table).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelkit import verify, wire
from kernelkit.errors import describe_exception
from kernelkit.jobs import OnBuilt, caught_warnings, unique
from kernelkit.jobs import check as check_module
from kernelkit.jobs.strict import SEAL, StrictChecker, pack, unpack
from kernelkit.measure import timer
from kernelkit.measure.measurement import SUSPECT_PCT, BenchResult
from kernelkit.measure.timer import Contender, Settings
from kernelkit.results import Status
from kernelkit.spec import BASELINES, Size, parse_dtype
from kernelkit.target import load

ROTATION = 3
KEPT = 4
RANGES = 24  # call numbers drawn in [2^j, 2^(j+1)) for j < RANGES: up to 16M timed calls


@wire.register
@dataclass
class StrictBenchOutcome:
    results: list[BenchResult]
    log: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # impl -> (call number, input set, outputs as bytes, the outputs' storage addresses, all alive when taken)
    rechecks: dict[str, list[tuple[int, int, bytes, tuple[int, ...]]]] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)

    @property
    def status(self) -> Status:
        failed = [r.status for r in self.results if r.status.failed]
        return failed[0] if failed else Status.PASSED


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
        from kernelkit.jobs.bench import JOB_SLACK, PER_CONTENDER_SLACK

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
        outcome.warnings = unique(notices)
        for result in outcome.results:
            result.warnings.extend(w for w in outcome.warnings if w not in result.warnings)
        return outcome

    def _execute(self, device: str, on_built: OnBuilt | None, notices: list[str]) -> StrictBenchOutcome:
        from kernelkit.jobs.bench import _ceilings, _contender_impl, attach_timing

        op = load(self.source)[self.op]
        sets = [unpack(s, device) for s in self.sets]
        nbytes, flops, working = self.cost
        ceilings = _ceilings(device, notices) if self.settings.calibrate else None
        outcome = StrictBenchOutcome([])
        entries: list[tuple[BenchResult, Contender, _Rotation]] = []
        for name, role in self.contenders:
            impl = _contender_impl(op, name)
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


def _secret_keep() -> frozenset[int]:
    return frozenset(secrets.randbelow(1 << j) + (1 << j) for j in range(RANGES))


def run_group(worker: Any, group: Any, settings: Settings, device: str, timeout: float,
              emit: Callable[[BenchResult], None]) -> None:
    """One (op, size, dtype) of a strict sweep: strict gate, then impls and baselines timed in two jobs."""
    from kernelkit.jobs.bench import _gate_message, _speedups

    checker = StrictChecker(device, worker, timeout)
    passed: list[tuple[str, str]] = [("eager", "baseline")] if group.eager else []
    for case in group.cases:
        role = "baseline" if case.impl in BASELINES else "impl"
        checked = checker.check(case)
        if checked.status is Status.PASSED:
            passed.append((case.impl, role))
            continue
        emit(BenchResult(case.op, case.impl, checked.backend, case.size, case.dtype, device, settings.mode,
                         checked.status, role=role, message=_gate_message(checked), details=checked.details))
    timed: list[BenchResult] = []
    for part in ([p for p in passed if p[1] == "impl"], [p for p in passed if p[1] == "baseline"]):
        if part:
            timed.extend(_time(worker, group, tuple(part), settings, device))
    _speedups(timed)
    for result in timed:
        emit(result)


def _time(worker: Any, group: Any, contenders: tuple[tuple[str, str], ...], settings: Settings,
          device: str) -> list[BenchResult]:
    op = load(group.source)[group.op]
    dtype = parse_dtype(group.dtype)
    made = [check_module.reference_outputs(op, group.size, dtype, device, secrets.randbelow(2**31 - 1) + 1)
            for _ in range(ROTATION)]
    nbytes, flops = op.cost(made[0][0], made[0][2])
    working = sum(t.numel() * t.element_size() for t in (*made[0][0], *made[0][2]) if isinstance(t, torch.Tensor))
    job = StrictBenchJob(group.source, group.op, group.size, group.dtype, contenders, settings,
                         tuple(pack(m[0]) for m in made), _secret_keep(), (nbytes, flops, working))
    outcome: StrictBenchOutcome = worker.run(job, job.timeout)
    atol, rtol = op.tolerance_for(dtype)
    for result in outcome.results:
        if result.status is not Status.PASSED:
            if outcome.log:
                result.details.setdefault("log", outcome.log)
            continue
        result.details["strict"] = True
        verdict = _judge_timed(outcome, result, made, atol, rtol)
        if verdict is not None:
            result.status, result.message = verdict
    return outcome.results


def _judge_timed(outcome: StrictBenchOutcome, result: BenchResult, made: Sequence[Any], atol: float,
                 rtol: float) -> tuple[Status, str] | None:
    from kernelkit.jobs import guards

    if outcome.tampered:
        return Status.CHEATED, guards.describe_tampering(outcome.tampered, "while timing, the impl")
    rechecks = outcome.rechecks.get(result.impl, [])
    seen: dict[int, int] = {}
    for n, _, _, ptrs in rechecks:  # every kept output was alive: one storage twice is one answer returned twice
        for ptr in ptrs:
            if ptr in seen:
                return Status.CHEATED, (f"timed calls {seen[ptr]} and {n} returned the same output storage: an answer "
                                        "replayed, not computed (a cache keyed on the inputs' address or version?)")
            seen[ptr] = n
    for n, which, data, _ in rechecks:
        _, refs, los = made[which]
        outs = tuple(o.to(r.device) if isinstance(o, torch.Tensor) else o
                     for o, r in zip(unpack(data, "cpu"), refs, strict=False))
        verdict = check_module.judge(outs, refs, los, atol, rtol)
        if verdict.status is not Status.PASSED:
            return verdict.status, f"timed call {n} (input set {which}) was wrong: {verdict.message}"
    ceiling = result.measurement.ceiling if result.measurement is not None else None
    # Only where every sample starts from memory (cold mode on a GPU) is a rate above the ceiling impossible; hot,
    # graph-warm and kernel samples may read the L2 (or a CPU's caches) faster than DRAM: there it stays a flag.
    if ceiling is not None and ceiling.suspect and result.mode == "cold" and result.device == "cuda":
        pct = max(p for p in (ceiling.pct_bandwidth, ceiling.pct_flops) if p is not None)
        return Status.SUSPECT, (f"{pct:.0f}% of the calibrated ceiling (above {SUSPECT_PCT:g}%): work skipped, done "
                                "elsewhere, or a cost model that counts too much")
    return None
