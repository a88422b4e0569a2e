"""Strict mode's benchmark, the judging side (the worker's side is jobs/strict_bench.py): strict checks as the gate,
timed calls on secret inputs drawn at random, each kept output judged here.

For one (op, size, dtype):
1. each case is checked in strict mode (runs/strict.py); only PASSED ones are timed;
2. this process draws SETS input sets from secret seeds (fewer where SETS would not fit in MEMORY_SHARE of the
   free memory: the results say so) and computes their references; the worker gets the sets' seeds only and
   makes them again (strict_worker.Drawn: their fingerprints must match, else they go as bytes).
   Each timed call runs on a set drawn at random once the call before it returned, and the outputs of calls the
   worker drew after they returned (one in each power-of-two range of call numbers, the last ranges reached) and
   of the last call come back as bytes, to be judged here against their own set's reference (an answer that is
   another set's is a replay);
3. the baselines are timed in a job of their own, on sets of their own: the eager baseline is the reference,
   and its outputs must not sit in the process that runs the impls;
4. a harness object replaced while timing is CHEATED; a time above SUSPECT_PCT of the calibrated ceiling is
   SUSPECT, a failure here (outside strict mode it is a flag in the table).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import psutil
import torch

from kernelkit import values
from kernelkit.deadline import Expired, deadline
from kernelkit.errors import BackendUnavailable, InputError
from kernelkit.jobs import check as check_module
from kernelkit.jobs.bench import gate_message, speedups
from kernelkit.jobs.strict_bench import StrictBenchJob, StrictBenchOutcome
from kernelkit.jobs.strict_worker import Drawn, fingerprint, pack, unpack
from kernelkit.loading import load
from kernelkit.measure import modes
from kernelkit.measure.measurement import SUSPECT_PCT, BenchResult
from kernelkit.measure.timer import Settings
from kernelkit.results import Status
from kernelkit.runs.strict import StrictChecker, judging_timeout
from kernelkit.spec import BASELINES, parse_dtype

SETS = 8  # input sets the timed calls draw from, where they fit
MIN_SETS = 3
MEMORY_SHARE = 0.5  # of the memory free when the sets are planned: the rest is the timing's and the impls'


def run_group(worker: Any, group: Any, settings: Settings, device: str, timeout: float,
              emit: Callable[[BenchResult], None]) -> None:
    """One (op, size, dtype) of a strict sweep: strict gate, then impls and baselines timed in two jobs."""

    checker = StrictChecker(device, worker, timeout)
    passed: list[tuple[str, str]] = [("eager", "baseline")] if group.eager else []
    for case in group.cases:
        role = "baseline" if case.impl in BASELINES else "impl"
        checked = checker.check(case)
        if checked.status is Status.PASSED:
            passed.append((case.impl, role))
            continue
        emit(BenchResult(case.op, case.impl, checked.backend, case.size, case.dtype, device, settings.mode,
                         checked.status, role=role, message=gate_message(checked), details=checked.details))
    timed: list[BenchResult] = []
    for part in ([p for p in passed if p[1] == "impl"], [p for p in passed if p[1] == "baseline"]):
        if part:
            timed.extend(_time(worker, group, tuple(part), settings, device, timeout))
    speedups(timed)
    for result in timed:
        emit(result)


def _time(worker: Any, group: Any, contenders: tuple[tuple[str, str], ...], settings: Settings,
          device: str, timeout: float) -> list[BenchResult]:
    op = load(group.source)[group.op]
    dtype = parse_dtype(group.dtype)
    note = ""
    try:
        with deadline(timeout):  # the op's own code, run here: bounded as a case is (runs/strict.py)
            seeds = [secrets.randbelow(2**31 - 1) + 1]
            made = [_made(op, group, dtype, device, seeds[0])]
            count, note = set_count(_set_bytes(made[0], len(contenders)), free_bytes(device), device)
            seeds.extend(secrets.randbelow(2**31 - 1) + 1 for _ in range(count - 1))
            made.extend(_made(op, group, dtype, device, seed) for seed in seeds[1:])
            nbytes, flops = op.cost(made[0][0], made[0][2])
    except (BackendUnavailable, InputError, Expired) as exc:
        status, message = ((Status.SKIPPED, str(exc)) if isinstance(exc, BackendUnavailable) else
                           (Status.INPUT_ERROR, str(exc)) if isinstance(exc, InputError) else
                           (Status.TIMEOUT, judging_timeout(timeout)))
        return [BenchResult(group.op, name, "?", group.size, group.dtype, device, settings.mode, status, role=role,
                            message=message) for name, role in contenders]
    working = sum(t.numel() * t.element_size() for t in (*made[0][0], *made[0][2]) if isinstance(t, torch.Tensor))
    drawn = tuple(Drawn(tuple(group.size), seed, True, fingerprint(m[0])) for seed, m in zip(seeds, made, strict=True))
    job = StrictBenchJob(group.source, group.op, group.size, group.dtype, contenders, settings, drawn,
                         (nbytes, flops, working))
    outcome: StrictBenchOutcome = worker.run(job, job.timeout)
    if outcome.undrawn:  # the worker made other inputs from the same seeds: the sets go as bytes
        job = replace(job, sets=tuple(pack(m[0]) for m in made))
        outcome = worker.run(job, job.timeout)
        note = " ".join(filter(None, [note, "strict bench: this op's inputs were not the same when the worker made "
                                      "them again from their seeds: they were sent as bytes"]))
    atol, rtol = op.tolerance_for(dtype, made[0][0])  # every set is of the group's one size
    for result in outcome.results:
        if note:
            result.warnings.append(note)
        if result.status is not Status.PASSED:
            if outcome.log:
                result.details.setdefault("log", outcome.log)
            continue
        result.details["strict"] = True
        verdict = _judge_timed(outcome, result, made, atol, rtol)
        if verdict is not None:
            result.status, result.message = verdict
    return outcome.results


def _made(op: Any, group: Any, dtype: torch.dtype, device: str, seed: int) -> Any:
    with values.device_draws():  # secret sets: the same where the same device makes them again (the worker)
        return check_module.reference_outputs(op, group.size, dtype, device, seed)


def _set_bytes(made: Any, contenders: int) -> int:
    """Memory one input set takes, both processes together: here its inputs, references and packed inputs; in the
    worker its inputs, one copy per contender and, per contender, one kept output (the size of the reference's)."""
    inputs = _tensor_bytes(made[0])
    outputs = _tensor_bytes(made[2])
    return inputs + _tensor_bytes(made[1]) + outputs + inputs + inputs * (1 + contenders) + outputs * contenders


def _tensor_bytes(values: Sequence[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


def free_bytes(device: str) -> int:
    """Memory free now where the sets live: the GPU's (torch.cuda.mem_get_info), else the host's."""
    if device == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    return int(psutil.virtual_memory().available)


def set_count(per_set: int, free: int, device: str) -> tuple[int, str]:
    """How many input sets the timed calls draw from: SETS where they fit in MEMORY_SHARE of ``free``, else as many
    as fit, MIN_SETS at least; with a warning saying why when it is fewer than SETS."""
    room = int(free * MEMORY_SHARE)
    if per_set <= 0 or SETS * per_set <= room:
        return SETS, ""
    count = max(MIN_SETS, room // per_set)
    where = "GPU" if device == "cuda" else "host"
    return count, (f"strict bench: timed calls draw from {count} input sets, not {SETS}: {SETS} would take "
                   f"{SETS * per_set / 2**30:.1f} GiB, more than {MEMORY_SHARE:.0%} of the "
                   f"{free / 2**30:.1f} GiB of {where} memory free; a cache keyed on a call count guesses right once "
                   f"in {count} calls")


def _judge_timed(outcome: StrictBenchOutcome, result: BenchResult, made: Sequence[Any], atol: float,
                 rtol: float) -> tuple[Status, str] | None:
    from kernelkit.jobs import seal

    if outcome.tampered:
        return Status.CHEATED, seal.describe_tampering(outcome.tampered, "while timing, the impl")
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
            other = next((j for j, m in enumerate(made) if j != which and
                          check_module.judge(outs, m[1], m[2], atol, rtol).status is Status.PASSED), None)
            if other is not None:
                return Status.CHEATED, (f"timed call {n} ran on input set {which} and returned input set {other}'s "
                                        "answer: replayed, not computed (a cache keyed on a call count, or on "
                                        "inputs seen before?)")
            return verdict.status, f"timed call {n} (input set {which}) was wrong: {verdict.message}"
    ceiling = result.measurement.ceiling if result.measurement is not None else None
    # Only where every sample starts from memory (cold mode on a GPU) is a rate above the ceiling impossible; hot,
    # graph-warm and kernel samples may read the L2 (or a CPU's caches) faster than DRAM: there it stays a flag.
    if ceiling is not None and ceiling.suspect and modes.get(result.mode).from_memory and result.device == "cuda":
        pct = max(p for p in (ceiling.pct_bandwidth, ceiling.pct_flops) if p is not None)
        return Status.SUSPECT, (f"{pct:.0f}% of the calibrated ceiling (above {SUSPECT_PCT:g}%): work skipped, done "
                                "elsewhere, or a cost model that counts too much")
    return None
