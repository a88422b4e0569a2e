"""``kernelkit bench`` (``kk.bench_op``): plan a target's (op, size, dtype) groups and run each on a worker; the
sweep's one loop, strict or plain.

For each group, in one worker process (Worker):
1. the correctness gate: each impl (and the torch.compile baseline) is checked as ``kernelkit check`` would
   (strict mode: judged here, runs/strict.py); only the PASSED ones are timed;
2. they are timed with the eager and torch.compile baselines, interleaved, in the worker (jobs/bench.py; strict
   mode: on secret inputs, each timed output judged here, runs/strict_bench.py); a KernelBench problem's or GPU
   MODE task's ``reference`` is its eager baseline, timed once; what the compile baseline's build cost (its
   check's first call) goes with its timed row;
3. speedups against each baseline with a 95% bootstrap interval.
Every result goes to the results store as soon as it exists, so an interrupted sweep keeps what finished. A group
whose worker dies or hangs while timing is timed again one contender at a time, to find the one at fault.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from math import prod
from pathlib import Path
from typing import Any

import torch

from kernelkit import errors, runner
from kernelkit.jobs.bench import BenchJob, BenchOutcome, gate_message, speedups
from kernelkit.jobs.check import CheckJob
from kernelkit.measure import timer
from kernelkit.measure.measurement import BenchResult
from kernelkit.measure.timer import Settings
from kernelkit.results import Status
from kernelkit.runner import DEFAULT_TIMEOUT, OnPhase, Worker
from kernelkit.runs import early, strict_bench
from kernelkit.scale import GpuSpec, Spread
from kernelkit.scale.spread import worker_envs
from kernelkit.spec import BASELINES, Case, Op, Size, dtype_name, parse_dtype, size_labeller
from kernelkit.target import TargetLike, make_cases, open_target, resolve_device, target_text

OnBenchResult = Callable[[BenchResult], None]
# A KernelBench problem's or GPU MODE task's impl that is its reference as written (the Model built again,
# ref_kernel): a sweep times it once, as the eager baseline, and naming it (--impl reference) times eager.
FORMAT_REFERENCE = "reference"


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


def bench_op(
    target: TargetLike,
    *,
    impls: Sequence[str] = (),
    sizes: Sequence[Size] = (),
    dtypes: Sequence[torch.dtype] = (),
    device: str | None = None,
    mode: str = "cold",
    budget: float | None = None,
    rse_target: float = timer.DEFAULT_RSE,
    baselines: bool | Sequence[str] = True,
    graph_warm: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    store: Any = None,
    command: str = "",
    on_result: OnBenchResult | None = None,
    strict: bool | None = None,
    gpus: GpuSpec = None,
    ray: str | None = None,
    solution: str | None = None,
    on_phase: OnPhase | None = None,
    on_plan: Callable[[int], None] | None = None,
    calibrate: bool = True,
) -> SweepReport:
    """Benchmark ``target`` (a built-in op name, a .py file, a KernelBench problem or level folder, a GPU MODE task
    folder; ``solution``: see target.open_target): every impl (or ``impls``) at every size and dtype.

    sizes: default the op's bench_sizes (cpu_sizes on the CPU). budget: seconds of sampling per contender and
    case (default 10 on a GPU, 0.3 on the CPU). baselines: True times eager and torch.compile beside the impls,
    False neither, a sequence those it names (("eager",): no compile, whose first build costs seconds a problem).
    A problem's or task's ``reference`` is its eager baseline, timed once. graph_warm: graph mode without
    rotating input copies. store: a
    store.Store to record the run in. Each (size, dtype) runs in a worker process: a crash or hang there ends that
    group, not the sweep. gpus ('all', 2, '0,1'): the groups spread over one worker per GPU; ray ('auto', 'local',
    an address): over a Ray cluster's GPUs (see kernelkit.scale); each result then records its GPU.
    on_phase: told what the sweep does now ("square 4096x4096 float32: timing 6 contender(s)"), for progress;
    on_plan: told once, before anything runs, how many results the sweep will give. calibrate: False leaves % of
    the calibrated ceilings out (no calibration is measured or read).
    strict: strict mode (README "Strict mode"; runs/strict_bench.py); default: on when the run is stored (``store``),
    since a stored run may become a comparison's baseline, unless it is spread over GPUs or a Ray cluster (strict
    mode times on one worker; ask for it and it is refused there).
    """
    target = target_text(target)
    # The workers start now, while the target opens (a level's hundred problem files) and the sweep is planned.
    first = resolve_device(device)
    with runner.started_early(first, worker_envs(gpus, ray, first)):
        if strict is not False:
            from kernelkit.runs.strict import seal_builtin_ops

            seal_builtin_ops()  # before the target's file is imported: it may change a built-in op
        opened = open_target(target, device, solution)
        dev, source, ops = opened.device, opened.source, opened.ops
        spend = timer.default_budget(dev) if budget is None else budget
        settings = Settings(mode=mode, budget=spend, rse_target=rse_target, graph_warm=graph_warm, calibrate=calibrate)
        report = SweepReport(device=dev, mode=mode)
        groups = plan_groups(source, ops, dev, impls, sizes, dtypes, baselines,
                             as_eager=FORMAT_REFERENCE if opened.format is not None else "")
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
            report.run_id = store.begin_run(command, report.env, op=",".join(o.name for o in ops), mode=mode,
                                            device=dev)

        label = size_labeller(ops)  # a GPU MODE task's sizes show as its specs: size=16 seed=4242

        def emit(result: BenchResult) -> None:
            report.results.append(label(result))
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
            worker = Worker(dev, Path(tmp) / "worker.log")
            try:
                if spread is not None:
                    spread.run([BenchGroupRun(g, settings, dev, timeout) for g in groups], emit, on_phase)
                for group in groups if spread is None else ():
                    worker.on_phase = _phase_of(group, on_phase, {op.name: op for op in ops})
                    if strict:
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


def _phase_of(group: BenchGroup, on_phase: OnPhase | None, ops: dict[str, Op]) -> OnPhase | None:
    """``on_phase`` told each phase with the group it belongs to: 'softmax 8192x1000 bfloat16: timing ...'."""
    if on_phase is None:
        return None
    shown = ops[group.op].size_text(group.size) if group.op in ops else "x".join(map(str, group.size))
    label = f"{group.op} {shown} {group.dtype}"
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
    dtypes: Sequence[torch.dtype], baselines: bool | Sequence[str], as_eager: str = "",
) -> list[BenchGroup]:
    """One group per (op, size, dtype): impls (all, or those named) and the baselines (those named in ``impls``;
    if none is named, ``baselines``: True both, False none, a sequence those it names).

    The compile baseline is a case like an impl's: it is checked before it is timed. An impl the op registers
    under a baseline's name (eager, compile) is timed as that baseline. ``as_eager``: an impl that is the
    reference as written (FORMAT_REFERENCE): never timed beside eager, and naming it names eager.
    """
    if as_eager:
        impls = list(dict.fromkeys("eager" if n == as_eager else n for n in impls))
    named = [n for n in impls if n in BASELINES]
    wanted = [n for n in impls if n not in BASELINES]
    chosen = named or _chosen_baselines(baselines)
    groups = []
    if wanted:  # as check: an impl named is an impl of any of the ops (an unknown one is an error naming them)
        make_cases(source, ops, device, wanted, [(1,)], dtypes[:1])
    for op in ops:
        op_sizes = [tuple(s) for s in sizes] or op.bench_sizes_for(device)
        if wanted and not any(n in op.all_impls() for n in wanted):
            continue  # the impls named belong to another op of the file
        mine = [n for n in wanted if n in op.all_impls()]
        cases = make_cases(source, [op], device, mine, op_sizes, dtypes) if mine or not impls else []
        cases = [c for c in cases if c.impl not in BASELINES and c.impl != as_eager]
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


def _chosen_baselines(baselines: bool | Sequence[str]) -> list[str]:
    if isinstance(baselines, bool):
        return list(BASELINES) if baselines else []
    unknown = [n for n in baselines if n not in BASELINES]
    if unknown:
        raise errors.SpecError(f"unknown baseline(s) {', '.join(map(repr, unknown))}: the baselines are "
                               f"{', '.join(BASELINES)}")
    return [n for n in BASELINES if n in baselines]


def _run_group(
    worker: Worker, group: BenchGroup, settings: Settings, device: str, timeout: float, emit: OnBenchResult,
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
    # impl -> seconds its passed check spent building it (torch.compile's first call): the timed row says so
    built: dict[str, float] = field(default_factory=dict)

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
                if checked.details.get("compile_seconds"):
                    self.built[case.impl] = float(checked.details["compile_seconds"])
                return []
            return [BenchResult(case.op, case.impl, checked.backend, case.size, case.dtype, self.device,
                                self.settings.mode, checked.status, role=role, message=gate_message(checked),
                                details=checked.details)]
        self.timed = True
        outcome: BenchOutcome = result
        for r in outcome.results:
            if r.status.failed and outcome.log:
                r.details.setdefault("log", outcome.log)
            r.warnings.extend(w for w in self.gate_warnings.get(r.impl, []) if w not in r.warnings)
            if r.impl in self.built:
                r.details.setdefault("compile_seconds", self.built[r.impl])
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
    speedups(results)
    culprits = [f"{r.impl} ({r.status.value})" for r in results if r.status in (Status.CRASHED, Status.TIMEOUT)]
    why = f"{', '.join(culprits)} crashed or hung" if culprits else "the worker died or hung once, not again"
    for r in results:
        if not r.status.failed:
            r.warnings.append(f"timed alone in a fresh worker, not interleaved with the others: while the group was "
                              f"timed together {why}")
    return results
