"""The benchmark's worker job: one (op, size, dtype), its contenders timed side by side (runs/bench.py plans the
sweep and checks each impl before it comes here).

In the worker, for one BenchJob:
1. the reference and its inputs (kept from the group's checks when the worker just made them);
2. each contender's first call, timed alone (compiles, autotuning, loads);
3. all contenders timed together, interleaved (timer.bench_many), each on its own fresh copy of the inputs; the
   output of each one's last timed call is judged again (jobs.check.judge, in its order);
4. rates from the op's cost model and % of the device's calibrated ceilings (SUSPECT above 105%);
5. one more call of each, alone, for the device memory it needs at its peak (measure.memory; not on the CPU).
What the worker warns about while timing (Python warnings, a failed calibration) travels back in each result's
``warnings``, not only into the worker's log. ``attach_timing`` and ``speedups`` serve the strict job too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelkit import backends, verify, wire
from kernelkit.errors import BackendUnavailable, InputError, describe_exception
from kernelkit.jobs import OnBuilt, caught_warnings, progress, unique
from kernelkit.jobs.check import judge, reference_outputs
from kernelkit.loading import load
from kernelkit.measure import bound, memory, timer
from kernelkit.measure.measurement import BenchResult, Measurement
from kernelkit.measure.stats import speedup
from kernelkit.measure.timer import Contender, MeasureFailure, Settings
from kernelkit.results import CaseResult, Status
from kernelkit.spec import Impl, Op, Size, parse_dtype

JOB_SLACK = 60.0  # seconds on top of the timing budget for one job: warm-up, probes, the final checks
PER_CONTENDER_SLACK = 5.0



@wire.register
@dataclass
class BenchOutcome:
    """A BenchJob's answer from the worker: one BenchResult per contender, and what the worker warned about."""

    results: list[BenchResult]
    log: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> Status:
        failed = [r.status for r in self.results if r.status.failed]
        return failed[0] if failed else Status.PASSED

    def record_warnings(self, notices: list[str]) -> None:
        """What the worker warned about while running the job, once each: in the outcome and in every result."""
        self.warnings = unique(notices)
        for result in self.results:
            result.warnings.extend(w for w in self.warnings if w not in result.warnings)


@dataclass(frozen=True)
class BenchJob:
    """Time ``contenders`` ((name, role) pairs) of one op at one size and dtype, in the process that runs it."""

    source: str
    op: str
    size: Size
    dtype: str
    seed: int
    contenders: tuple[tuple[str, str], ...]
    settings: Settings

    @property
    def timeout(self) -> float:
        """Seconds the timing may take once every contender is built (its first call made)."""
        per = self.settings.budget + timer.WARMUP_MAX_SECONDS + PER_CONTENDER_SLACK
        return JOB_SLACK + len(self.contenders) * per

    @property
    def limit(self) -> str:
        """The timing limit as a TIMEOUT's message names it: what it is made of, and the flag that moves it."""
        per = timer.WARMUP_MAX_SECONDS + PER_CONTENDER_SLACK
        return (f"the timing limit, {JOB_SLACK:g} s + {len(self.contenders)} contender(s) x ({self.settings.budget:g} "
                f"s of --budget + {per:g} s); it follows --budget, not --timeout")

    def failed(self, device: str, status: Status, message: str, log: str = "") -> BenchOutcome:
        """Every contender ``status``; a worker that died or hung (CRASHED, TIMEOUT) marks the outcome
        ``whole_group``: the contenders are then timed again one by one (BenchGroupRun) to find the one at fault."""
        whole = {"whole_group": True} if status in (Status.CRASHED, Status.TIMEOUT) else {}
        return BenchOutcome([self._result(name, role, device, status, message) for name, role in self.contenders],
                            log=log, details=whole)

    def _result(self, name: str, role: str, device: str, status: Status, message: str = "",
                backend: str = "?") -> BenchResult:
        return BenchResult(self.op, name, backend, self.size, self.dtype, device, self.settings.mode, status,
                           role=role, message=message)

    def execute(self, device: str, on_built: OnBuilt | None = None) -> BenchOutcome:
        """Build each contender (its first call, timed), then time them all; failures are per contender.

        Warnings raised meanwhile (and kernelkit's own notices) come back in the outcome and in every result.
        """
        notices: list[str] = []
        with caught_warnings(notices):
            try:
                outcome = self._execute(device, on_built, notices)
            except BackendUnavailable as exc:  # the case's inputs do not fit the device (jobs.check.reference_outputs)
                outcome = self.failed(device, Status.SKIPPED, str(exc))
        outcome.record_warnings(notices)
        return outcome

    def _execute(self, device: str, on_built: OnBuilt | None, notices: list[str]) -> BenchOutcome:
        op = load(self.source)[self.op]
        dtype = parse_dtype(self.dtype)
        progress.say("computing the reference")
        try:
            inputs, refs, los = reference_outputs(op, self.size, dtype, device, self.seed)
        except InputError as exc:  # the op's inputs do not fit its reference: no contender can be timed
            return self.failed(device, Status.INPUT_ERROR, str(exc))
        nbytes, flops = op.cost(inputs, los)
        working = sum(t.numel() * t.element_size() for t in (*inputs, *los) if isinstance(t, torch.Tensor))
        atol, rtol = op.tolerance_for(dtype, inputs)
        ceilings = device_ceilings(device, notices) if self.settings.calibrate else None

        results: dict[str, BenchResult] = {}
        entries: list[tuple[BenchResult, Contender, list[Any]]] = []
        for name, role in self.contenders:
            impl = contender_impl(op, name)
            result = self._result(name, role, device, Status.PASSED, backend=impl.backend)
            results[name] = result
            progress.say(f"{name}: first call" + (" (torch.compile compiles it)" if name == "compile" else ""))
            try:
                contender, last = _prepare(impl, inputs, nbytes, flops, working, device)
            except Exception as exc:  # noqa: BLE001 - reported as this contender's status
                result.status, result.message = Status.RUNTIME_ERROR, describe_exception(exc)
                continue
            entries.append((result, contender, last))
        if on_built is not None:
            on_built()

        progress.say(f"timing {len(entries)} contender(s), {self.settings.mode} mode")
        measured = timer.bench_many([c for _, c, _ in entries], self.settings, device)
        progress.say("rechecking the last outputs, measuring peak memory")
        for (result, contender, last), m in zip(entries, measured, strict=True):
            if not attach_timing(result, m, nbytes, flops, ceilings, op):
                continue
            verdict = _recheck(last[0], refs, los, atol, rtol)
            if verdict is not None:
                result.status, result.message = verdict
            m.peak_bytes = _peak_memory(contender, device, m.warnings)
        speedups(list(results.values()))
        details = {"context_lost": True} if device == "cuda" and backends.cuda_context_lost() else {}
        return BenchOutcome(list(results.values()), details=details)


def _peak_memory(contender: Contender, device: str, warnings: list[str]) -> int | None:
    """One more call, alone, for the device memory it needs at its peak (measure.memory; None on the CPU).

    It runs after the timing, so it cannot disturb it; a failure (out of memory) is a warning, not a status."""
    call = contender.make_call(contender.args) if contender.make_call is not None else contender.fn
    try:
        return memory.peak_bytes(call, device)
    except Exception as exc:  # noqa: BLE001 - the timing stands; only the memory figure is missing
        warnings.append(f"peak memory not measured: {describe_exception(exc)}")
        return None


def contender_impl(op: Op, name: str) -> Impl:
    """The impl called ``name``, else the baseline of that name derived from the reference (eager: the reference)."""
    if name in op.all_impls():
        return op.get_impl(name)
    derived = backends.baseline_impl(name, op)
    if derived is None:
        raise KeyError(f"op {op.name!r} has no impl or baseline {name!r}")
    return derived


def _prepare(
    impl: Impl, inputs: Sequence[Any], nbytes: int, flops: int | None, working: int, device: str
) -> tuple[Contender, list[Any]]:
    """A fresh copy of the inputs, a callable keeping its last output, and the first call made and timed.

    The contender also carries the inputs and a way to call the impl on copies of them (graph mode's rotation).
    """
    mine = verify.fresh_copies(inputs)
    last: list[Any] = [None]
    fn = impl.fn

    def call() -> None:
        last[0] = fn(*mine)

    first = timer.first_call(call, device)
    return Contender(impl.name, call, nbytes, flops, working, first_call=first, args=mine,
                     make_call=lambda copies: lambda: fn(*copies)), last


def _recheck(
    output: Any, refs: Sequence[torch.Tensor], los: Sequence[torch.Tensor], atol: float, rtol: float,
) -> tuple[Status, str] | None:
    """None when the last timed call's output is still right; else why not."""
    verdict = judge(verify.as_outputs(output), refs, los, atol, rtol)
    if verdict.status is Status.PASSED:
        return None
    wrong = " is wrong" if verdict.status is Status.INCORRECT_NUMERICS else ""
    return verdict.status, f"the last timed call's output{wrong}: {verdict.message}"


def attach_timing(result: BenchResult, m: Measurement | MeasureFailure, nbytes: int | None, flops: int | None,
                  ceilings: Any, op: Op) -> bool:
    """Give ``result`` its timing with % of the device's ceilings (the op's compute_dtype decides the FLOP rate), or
    RUNTIME_ERROR when the timing failed; False then."""
    if isinstance(m, MeasureFailure):
        tampered = isinstance(m.error, bound.ClockTampered)  # its clock replaced: the impl's doing, not a failure
        result.status = Status.CHEATED if tampered else Status.RUNTIME_ERROR
        result.message = str(m.error) if tampered else describe_exception(m.error)
        return False
    if ceilings is not None:
        from kernelkit.measure.ceilings import ceiling_for

        m.ceiling = ceiling_for(nbytes, flops, m.median, result.dtype, ceilings,
                                                compute_dtype=op.compute_dtype)
    result.measurement = m
    return True


def speedups(results: list[BenchResult]) -> None:
    """Each timed result against each timed baseline (the compile baseline against eager)."""
    baselines = {r.impl: r for r in results if r.role == "baseline" and r.status is Status.PASSED and r.measurement}
    for r in results:
        if r.status is not Status.PASSED or r.measurement is None:
            continue
        for name, base in baselines.items():
            if base is r or (r.role == "baseline" and name != "eager"):
                continue
            assert base.measurement is not None
            r.speedups[name] = speedup(base.measurement.samples, r.measurement.samples)


def device_ceilings(device: str, notices: list[str]) -> Any:
    """The device's calibrated ceilings (measured once, then cached on disk); None, and a notice, when calibration
    fails."""
    from kernelkit.measure.ceilings import calibrate

    progress.say("reading this device's ceilings (calibrated once per device, then cached)")
    try:
        return calibrate(device)
    except Exception as exc:  # noqa: BLE001 - a result without % of ceiling beats no result
        notices.append(f"no % of ceiling: {describe_exception(exc)}")
        return None


def gate_message(checked: CaseResult) -> str:
    if checked.status is Status.SKIPPED:
        return checked.message
    return f"not timed: check gave {checked.status.value}: {checked.message}"
