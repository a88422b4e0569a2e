"""Benchmark an op (``kernelkit bench``, ``kk.bench_op``): check every impl, then time impls and baselines side by
side, one (size, dtype) at a time.

For each (op, size, dtype) of the sweep, in one worker process:
1. the correctness gate: each impl (and the torch.compile baseline) is checked as ``kernelkit check`` would;
   only the PASSED ones are timed;
2. a BenchJob times them together with the eager and torch.compile baselines, interleaved (timer.bench_many),
   each on its own fresh copy of the inputs; the output of each one's last timed call is judged again (the
   checks of jobs.check.judge, in their order);
3. rates from the op's cost model, % of the device's calibrated ceilings (SUSPECT above 105%) and speedups
   against each baseline with a 95% bootstrap interval;
4. one more call of each, alone, for the device memory it needs at its peak (measure.memory; not on the CPU).
Every result goes to the results store as soon as it exists, so an interrupted sweep keeps what finished.
What the worker warns about while timing (Python warnings, a failed calibration) travels back in each result's
``warnings``, not only into the worker's log.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from math import prod
from pathlib import Path
from typing import Any

import torch

from kernelkit import backends, errors, runner, verify, wire
from kernelkit.backends import early
from kernelkit.errors import BackendUnavailable, InputError, describe_exception
from kernelkit.jobs import OnBuilt, caught_warnings, progress, unique
from kernelkit.jobs import strict as _strict  # noqa: F401 - imported with kernelkit: seals the harness first
from kernelkit.jobs.check import CheckJob, judge, reference_outputs
from kernelkit.measure import memory, timer
from kernelkit.measure.measurement import BenchResult, Measurement
from kernelkit.measure.stats import speedup
from kernelkit.measure.timer import Contender, MeasureFailure, Settings
from kernelkit.results import CaseResult, Status
from kernelkit.scale import GpuSpec, Spread
from kernelkit.spec import BASELINES, Case, Impl, Op, Size, dtype_name, parse_dtype
from kernelkit.target import load, make_cases, open_target

JOB_SLACK = 60.0  # seconds on top of the timing budget for one job: warm-up, probes, the final checks
PER_CONTENDER_SLACK = 5.0

OnBenchResult = Callable[[BenchResult], None]


@dataclass
class SweepReport:
    """Every result of a sweep, in order; ``run_id`` when they were stored."""

    device: str
    mode: str
    results: list[BenchResult] = field(default_factory=list)
    run_id: int | None = None
    interrupted: bool = False
    env: dict[str, Any] = field(default_factory=dict)
    store_error: str = ""  # why results could not be stored (then every result is in ``recovery``)
    recovery: Path | None = None  # the file holding the run's results when the store failed (store.recovery)

    @property
    def ok(self) -> bool:
        return (not self.interrupted and not self.store_error and bool(self.results)
                and not any(r.status.failed for r in self.results))


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
        outcome.warnings = unique(notices)
        for result in outcome.results:
            result.warnings.extend(w for w in outcome.warnings if w not in result.warnings)
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
        atol, rtol = op.tolerance_for(dtype)
        ceilings = _ceilings(device, notices) if self.settings.calibrate else None

        results: dict[str, BenchResult] = {}
        entries: list[tuple[BenchResult, Contender, list[Any]]] = []
        for name, role in self.contenders:
            impl = _contender_impl(op, name)
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
        _speedups(list(results.values()))
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


def _contender_impl(op: Op, name: str) -> Impl:
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
        result.status, result.message = Status.RUNTIME_ERROR, describe_exception(m.error)
        return False
    if ceilings is not None:
        from kernelkit.measure import ceilings as device_ceilings

        m.ceiling = device_ceilings.ceiling_for(nbytes, flops, m.median, result.dtype, ceilings,
                                                compute_dtype=op.compute_dtype)
    result.measurement = m
    return True


def _speedups(results: list[BenchResult]) -> None:
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


def _ceilings(device: str, notices: list[str]) -> Any:
    """The device's calibrated ceilings (measured once, then cached on disk); None, and a notice, when calibration
    fails."""
    from kernelkit.measure import ceilings as device_ceilings

    progress.say("reading this device's ceilings (calibrated once per device, then cached)")
    try:
        return device_ceilings.calibrate(device)
    except Exception as exc:  # noqa: BLE001 - a result without % of ceiling beats no result
        notices.append(f"no % of ceiling: {describe_exception(exc)}")
        return None


def bench_op(
    target: str,
    *,
    impls: Sequence[str] = (),
    sizes: Sequence[Size] = (),
    dtypes: Sequence[torch.dtype] = (),
    device: str | None = None,
    mode: str = "cold",
    budget: float | None = None,
    rse_target: float = timer.DEFAULT_RSE,
    baselines: bool = True,
    graph_warm: bool = False,
    timeout: float = runner.DEFAULT_TIMEOUT,
    store: Any = None,
    command: str = "",
    on_result: OnBenchResult | None = None,
    strict: bool | None = None,
    gpus: GpuSpec = None,
    ray: str | None = None,
    solution: str | None = None,
    on_phase: runner.OnPhase | None = None,
    on_plan: Callable[[int], None] | None = None,
    calibrate: bool = True,
) -> SweepReport:
    """Benchmark ``target`` (a built-in op name, a .py file, a KernelBench problem or level folder, a GPU MODE task
    folder; ``solution``: see target.open_target): every impl (or ``impls``) at every size and dtype.

    sizes: default the op's bench_sizes (cpu_sizes on the CPU). budget: seconds of sampling per contender and
    case (default 10 on a GPU, 0.3 on the CPU). graph_warm: graph mode without rotating input copies. store: a
    store.Store to record the run in. Each (size, dtype) runs in a worker process: a crash or hang there ends that
    group, not the sweep. gpus ('all', 2, '0,1'): the groups spread over one worker per GPU; ray ('auto', 'local',
    an address): over a Ray cluster's GPUs (see kernelkit.scale); each result then records its GPU.
    on_phase: told what the sweep does now ("square 4096x4096 float32: timing 6 contender(s)"), for progress;
    on_plan: told once, before anything runs, how many results the sweep will give. calibrate: False leaves % of
    the calibrated ceilings out (no calibration is measured or read).
    strict: strict mode (README "Strict mode"; jobs/strict_bench.py); default: on when the run is stored (``store``),
    since a stored run may become a comparison's baseline, unless it is spread over GPUs or a Ray cluster (strict
    mode times on one worker; ask for it and it is refused there).
    """
    if strict is not False:
        from kernelkit.jobs.strict import seal_builtin_ops

        seal_builtin_ops()  # before the target's file is imported: it may change a built-in op
    opened = open_target(target, device, solution)
    dev, source, ops = opened.device, opened.source, opened.ops
    spend = timer.default_budget(dev) if budget is None else budget
    settings = Settings(mode=mode, budget=spend, rse_target=rse_target, graph_warm=graph_warm, calibrate=calibrate)
    report = SweepReport(device=dev, mode=mode)
    groups = plan_groups(source, ops, dev, impls, sizes, dtypes, baselines)
    if on_plan is not None:
        on_plan(sum(len(g.cases) + int(g.eager) for g in groups))
    spread = Spread.of(gpus, ray, dev)  # None: one worker in this process
    strict = (store is not None and spread is None) if strict is None else strict
    if strict and spread is not None:
        from kernelkit.errors import SpecError

        raise SpecError("strict mode times on one worker: drop gpus=/ray=, or pass strict=False (--no-strict)")
    if store is not None:
        from kernelkit.measure.host import fingerprint

        report.env = fingerprint(opened.user_file)
        if opened.format is not None:  # the problem's own path is user_file; which solution ran is part of the run
            report.env.update(format=opened.format, solution=opened.solution)
        if spread is not None:
            report.env.update(spread.describe(report.env.get("user_file")))
        report.run_id = store.begin_run(command, report.env, op=",".join(o.name for o in ops), mode=mode, device=dev)

    def emit(result: BenchResult) -> None:
        report.results.append(result)
        if store is not None and not report.store_error:
            try:
                store.add_result(report.run_id, result)
            except errors.KernelkitError as exc:  # the store failed: the sweep goes on, the results are kept
                report.store_error = str(exc)
        if on_result is not None:
            on_result(result)

    status = "finished"
    with tempfile.TemporaryDirectory(prefix="kernelkit-bench-") as tmp, \
            early.started([c for g in groups for c in g.cases], dev):
        worker = runner.Worker(dev, Path(tmp) / "worker.log")
        try:
            if spread is not None:
                spread.run([BenchGroupRun(g, settings, dev, timeout) for g in groups], emit)
            for group in groups if spread is None else ():
                worker.on_phase = _phase_of(group, on_phase)
                if strict:
                    from kernelkit.jobs import strict_bench

                    strict_bench.run_group(worker, group, settings, dev, timeout, emit)
                else:
                    _run_group(worker, group, settings, dev, timeout, emit)
        except KeyboardInterrupt:
            report.interrupted, status = True, "interrupted"
        except BaseException:
            status = "failed"  # a crash of the sweep itself: never stored as finished
            raise
        finally:
            worker.stop()
            if store is not None:
                _finish(store, report, status, command)
    return report


def _phase_of(group: BenchGroup, on_phase: runner.OnPhase | None) -> runner.OnPhase | None:
    """``on_phase`` told each phase with the group it belongs to: 'softmax 8192x1000 bfloat16: timing ...'."""
    if on_phase is None:
        return None
    label = f"{group.op} {'x'.join(map(str, group.size))} {group.dtype}"
    return lambda text: on_phase(f"{label}: {text}")


def _finish(store: Any, report: SweepReport, status: str, command: str) -> None:
    """Mark the stored run ended; when a result could not be stored, 'incomplete', and every result is written to
    a recovery file (report.recovery) instead."""
    from kernelkit.store import recovery

    try:
        store.finish_run(report.run_id, "incomplete" if report.store_error and status == "finished" else status)
    except errors.KernelkitError as exc:
        report.store_error = report.store_error or str(exc)
    if report.store_error:
        report.recovery = recovery.save(report.results, report.env, report.run_id, command)


@dataclass
class BenchGroup:
    """One (op, size, dtype) of a sweep: the cases to check before timing, and the eager baseline if asked."""

    source: str
    op: str
    size: Size
    dtype: str
    cases: list[Case]
    eager: bool


def plan_groups(
    source: str, ops: Sequence[Op], device: str, impls: Sequence[str], sizes: Sequence[Size],
    dtypes: Sequence[torch.dtype], baselines: bool,
) -> list[BenchGroup]:
    """One group per (op, size, dtype): impls (all, or those named) and the baselines (those named in ``impls``;
    if none is named, both unless ``baselines`` is False).

    The compile baseline is a case like an impl's: it is checked before it is timed. An impl the op registers
    under a baseline's name (eager, compile) is timed as that baseline.
    """
    named = [n for n in impls if n in BASELINES]
    wanted = [n for n in impls if n not in BASELINES]
    chosen = named or (list(BASELINES) if baselines else [])
    groups = []
    if wanted:  # as check: an impl named is an impl of any of the ops (an unknown one is an error naming them)
        make_cases(source, ops, device, wanted, [(1,)], dtypes[:1])
    for op in ops:
        op_sizes = [tuple(s) for s in sizes] or op.bench_sizes_for(device)
        if wanted and not any(n in op.all_impls() for n in wanted):
            continue  # the impls named belong to another op of the file
        mine = [n for n in wanted if n in op.all_impls()]
        cases = make_cases(source, [op], device, mine, op_sizes, dtypes) if mine or not impls else []
        cases = [c for c in cases if c.impl not in BASELINES]
        for size in op_sizes:
            for dtype in dtypes or op.dtypes:
                name = dtype_name(dtype)
                mine = [c for c in cases if c.size == tuple(size) and c.dtype == name]
                if "compile" in chosen:
                    mine.append(Case(source, op.name, "compile", tuple(size), name, 0))
                if "eager" in chosen and "eager" in op.impls:
                    mine.append(Case(source, op.name, "eager", tuple(size), name, 0))
                eager = "eager" in chosen and "eager" not in op.impls
                groups.append(BenchGroup(source, op.name, tuple(size), name, mine, eager))
    return groups


def _run_group(
    worker: runner.Worker, group: BenchGroup, settings: Settings, device: str, timeout: float, emit: OnBenchResult,
) -> None:
    """Check the group's cases; time those that passed, with the baselines; emit every result."""
    run = BenchGroupRun(group, settings, device, timeout)
    while (step := run.next_job()) is not None:
        job, seconds = step
        for result in run.take(job, worker.run(job, seconds)):
            emit(result)


@dataclass
class BenchGroupRun:
    """A BenchGroup's jobs, one at a time (scale.shard.GroupRun): each case's check, then one BenchJob timing
    those that passed together with the baselines. Moved to another worker midway, it goes on where it stopped."""

    group: BenchGroup
    settings: Settings
    device: str
    timeout: float
    checked: int = 0  # cases of the group checked so far
    passed: list[tuple[str, str]] = field(default_factory=list)  # (name, role) of those that passed
    timed: bool = False
    # After the timing job's worker died or hung: the contenders still to time alone, and the results so far.
    alone: list[tuple[str, str]] = field(default_factory=list)
    held: list[BenchResult] = field(default_factory=list)
    gate_warnings: dict[str, list[str]] = field(default_factory=dict)  # impl -> what its passed check warned of

    @property
    def source(self) -> str:
        return self.group.source

    @property
    def cost(self) -> float:
        """Seconds, roughly: each contender samples for up to the budget whatever its size; a big input adds
        its references and checks (about a second per GB)."""
        contenders = len(self.group.cases) + int(self.group.eager)
        per = self.settings.budget + timer.WARMUP_MAX_SECONDS
        return contenders * per + prod(self.group.size) * parse_dtype(self.group.dtype).itemsize / 1e9

    def next_job(self) -> tuple[CheckJob | BenchJob, float] | None:
        if self.checked < len(self.group.cases):
            return CheckJob(self.group.cases[self.checked]), self.timeout
        contenders = ([("eager", "baseline")] if self.group.eager else []) + self.passed
        if self.alone:
            contenders, self.timed = self.alone[:1], False
        if self.timed or not contenders:
            return None
        g = self.group
        job = BenchJob(g.source, g.op, g.size, g.dtype, 0, tuple(contenders), self.settings)
        return job, job.timeout

    def take(self, job: Any, result: Any) -> list[BenchResult]:
        """The results to emit for ``job``'s ``result``: a failed check, or every timed contender."""
        if isinstance(job, CheckJob):
            case, checked = job.case, result
            self.checked += 1
            role = "baseline" if case.impl in BASELINES else "impl"
            if checked.status is Status.PASSED:
                self.passed.append((case.impl, role))
                self.gate_warnings[case.impl] = list(checked.warnings)
                return []
            return [BenchResult(case.op, case.impl, checked.backend, case.size, case.dtype, self.device,
                                self.settings.mode, checked.status, role=role, message=_gate_message(checked),
                                details=checked.details)]
        self.timed = True
        outcome: BenchOutcome = result
        for r in outcome.results:
            if r.status.failed and outcome.log:
                r.details.setdefault("log", outcome.log)
            r.warnings.extend(w for w in self.gate_warnings.get(r.impl, []) if w not in r.warnings)
        if self.alone:  # one contender timed alone, after the group's worker died or hung
            self.alone.pop(0)
            self.held.extend(outcome.results)
            return [] if self.alone else _after_alone(self.held)
        if outcome.details.get("whole_group") and len(outcome.results) > 1:
            # Whose fault? Each contender is timed again alone, in a fresh worker: the one that crashes or hangs
            # again gets that status, the others their own verdicts.
            self.alone = [(r.impl, r.role) for r in outcome.results]
            return []
        return list(outcome.results)

    def moved(self, source: str) -> BenchGroupRun:
        cases = [replace(c, source=source) for c in self.group.cases]
        return replace(self, group=replace(self.group, source=source, cases=cases), passed=list(self.passed))


def _after_alone(results: list[BenchResult]) -> list[BenchResult]:
    """Results of contenders timed one by one after their group's worker died or hung: speedups across them, and
    a note on each that was timed that way."""
    _speedups(results)
    culprits = [f"{r.impl} ({r.status.value})" for r in results if r.status in (Status.CRASHED, Status.TIMEOUT)]
    why = f"{', '.join(culprits)} crashed or hung" if culprits else "the worker died or hung once, not again"
    for r in results:
        if not r.status.failed:
            r.warnings.append(f"timed alone in a fresh worker, not interleaved with the others: while the group was "
                              f"timed together {why}")
    return results


def _gate_message(checked: CaseResult) -> str:
    if checked.status is Status.SKIPPED:
        return checked.message
    return f"not timed: check gave {checked.status.value}: {checked.message}"
